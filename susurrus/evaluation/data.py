"""Manifests of recorded speech (JSON lines: id, audio, text, language, duration_s, ...)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Real speech lives beside the checkout (../shared/data); SUSURRUS_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("SUSURRUS_DATA",
                                  Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@dataclass
class Item:
    id: str
    audio: Path
    text: str
    language: str
    duration_s: float
    approximate: bool = False
    segments: list[dict] = field(default_factory=list)
    condition: str = ""  # what makes it hard ("non-native (...); numbers"), or its corpus
    set: str = ""  # the folder of its manifest (dev, hard, ...)

    @property
    def conditions(self) -> list[str]:
        """The item's conditions, for per-condition reports: each ``;`` part of ``condition``;
        added noise is grouped by its SNR alone ("noise 5dB SNR"), other details in brackets are
        dropped except for non-native speakers ("non-native (Mandarin L1, child)")."""
        out = []
        for part in (p.strip() for p in self.condition.split(";")):
            if not part:
                continue
            snr = re.search(r"(-?\d+\s*dB SNR)", part)
            if part.startswith("background noise") and snr:
                part = f"noise {snr.group(1)}"
            elif not part.startswith("non-native"):
                part = re.sub(r"\s*\(.*?\)", "", part).strip()
            out.append(part)
        return [f"set: {self.set}"] * bool(self.set) + (out or ["(none)"])


AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".aiff", ".aif"})


def read_items(paths: list[str | Path]) -> list[Item]:
    """Items from manifests (a ``.jsonl`` file or a folder holding ``manifest.jsonl``) and from
    audio files or folders of them without a manifest (unlabelled: ``text`` is empty)."""
    items: list[Item] = []
    for p in map(Path, paths):
        if p.is_dir() and not (p / "manifest.jsonl").exists():
            files = sorted(f for f in p.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES)
            if not files:
                raise FileNotFoundError(f"{p}: no manifest.jsonl and no audio files")
            items += [_unlabelled(f) for f in files]
        elif p.is_dir() or p.suffix == ".jsonl":
            items += read_manifest(p)
        elif p.is_file():
            items.append(_unlabelled(p))
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    return items


def _unlabelled(path: Path) -> Item:
    return Item(id=path.stem, audio=path.resolve(), text="", language="", duration_s=0.0, condition="unlabelled")


def read_manifest(path: str | Path) -> list[Item]:
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.jsonl"
    items = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        items.append(Item(id=d["id"], audio=(path.parent / d["audio"]).resolve(), text=d.get("text", ""),
                          language=d.get("language", "en"), duration_s=float(d.get("duration_s", 0)),
                          approximate=d.get("text_confidence") == "approximate",
                          segments=d.get("segments", []),
                          condition=d.get("condition") or d.get("group", "").split("/")[0],
                          set=path.parent.name))
    return items
