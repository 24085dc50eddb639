"""Where ``susurrus transcribe`` writes each input's results: one distinct name per input.

An input's results are named after its file (``talk.wav`` -> ``talk.txt``). Two inputs of one
command must never write the same file (the second would silently replace the first), so
inputs that share a name are told apart by what tells them apart for the user who typed them:

* the same name in different folders (``mon/a.wav tue/a.wav``) keep the folders they differ by,
  as subfolders of the output folder (``out/mon/a.txt``, ``out/tue/a.txt``): the layout the
  user already has;
* the same name with different extensions (``jfk.mp3 jfk.flac``) keep the extension
  (``jfk.mp3.txt``, ``jfk.flac.txt``), as tools that convert files do.

The same file given twice is transcribed once.
"""

from __future__ import annotations

import os
from pathlib import Path


def output_names(paths: list[str]) -> dict[str, Path]:
    """Each distinct input's output name without the format's extension, relative to the output
    folder (``{"d1/a.wav": Path("d1/a"), ...}``); the same file given twice appears once."""
    unique: dict[str, Path] = {}
    for p in paths:
        real = Path(os.path.realpath(p))
        if all(real != r for r in unique.values()):
            unique[p] = real
    names = {p: Path(real.stem) for p, real in unique.items()}
    by_name: dict[Path, list[str]] = {}
    for p, name in names.items():
        by_name.setdefault(name, []).append(p)
    for group in by_name.values():
        if len(group) > 1:
            names.update(_told_apart({p: unique[p] for p in group}))
    return names


def _told_apart(group: dict[str, Path]) -> dict[str, Path]:
    """Names for inputs of the same stem: the fewest parent folders (and the extension, when
    the folders alone do not tell them apart) that make each one its own."""
    depth = max(len(real.parents) for real in group.values())
    for k in range(depth + 1):
        for with_suffix in (False, True):
            if k == 0 and not with_suffix:
                continue
            names = {p: _name(real, k, with_suffix) for p, real in group.items()}
            if len(set(names.values())) == len(names):
                return names
    return {p: Path(*real.parts[1:]) for p, real in group.items()}  # not reached: distinct real paths


def _name(real: Path, folders: int, with_suffix: bool) -> Path:
    parts = real.parent.parts[1:][-folders:] if folders else ()
    return Path(*parts, real.name if with_suffix else real.stem)


def target(out_dir: Path, name: Path, fmt: str) -> Path:
    """The file ``name`` (:func:`output_names`) of format ``fmt`` in ``out_dir``, its folder made."""
    path = out_dir / f"{name}.{fmt}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
