"""Argument checks for the command line, run before any work (and before PyTorch is imported):
each bad value is refused with one line naming the option, never a traceback after the work."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from susurrus.model.languages import language_code, language_name


class UsageError(Exception):
    """A bad argument found after parsing (it needs the model or the file system): exit 2."""


def device_arg(text: str) -> str:
    """``--device``: auto, cpu, cuda or cuda:N (whether that GPU is there: :func:`check_device`)."""
    name = text.strip().lower()
    kind, _, index = name.partition(":")
    if name in ("auto", "cpu", "cuda") or (kind == "cuda" and index.isdigit()):
        return name
    raise argparse.ArgumentTypeError(f"{text!r}: expected auto, cpu, cuda or cuda:N")


def check_device(device: str) -> None:
    """A device torch does not see (``cuda`` on a machine without one) as a usage error."""
    from susurrus.api import resolve_device

    try:
        resolve_device(device)
    except ValueError as err:
        raise UsageError(str(err)) from err


def int_range(low: int, high: int | None = None, unit: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer within ``low..high`` (``high`` None: no upper bound)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            span = f"within {low}..{high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {span}{unit}, not {value}")
        return value
    parse.__name__ = "integer"
    return parse


def float_range(low: float, high: float | None = None, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a number above (``low_open``) or at least ``low``, at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value != value or (value <= low if low_open else value < low) or (high is not None and value > high):
            span = (f"above {low:g}" if low_open else f"at least {low:g}") + (f" and at most {high:g}" if high else "")
            raise argparse.ArgumentTypeError(f"must be {span}, not {text}")
        return value
    parse.__name__ = "number"
    return parse


def ms_list(text: str) -> list[int]:
    """An argparse ``type``: distinct non-negative milliseconds, comma-separated (``0,160,320``)."""
    parse = int_range(0, 5000, " ms")
    values = [parse(part.strip()) for part in text.split(",") if part.strip()]
    if not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct milliseconds, comma-separated, not {text!r}")
    return values


def origins_arg(text: str) -> tuple[str, ...] | None:
    """An argparse ``type``: ``--allowed-origins``, comma-separated origins or ``*``."""
    from susurrus.server.access import parse_origins

    try:
        return parse_origins(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def language_arg(text: str) -> str:
    """An argparse ``type``: a Whisper language code or name (``de``, ``German``) as its code."""
    try:
        return language_code(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def check_model_options(model: Any, language: str | None, task: str | None) -> None:
    """Refuse what the loaded model cannot do: a language other than English, or translation, on an
    English-only model; a language the multilingual model's tokenizer lacks."""
    if not model.is_multilingual:
        if language not in (None, "en"):
            raise UsageError(f"{model.name} is English-only: it cannot transcribe {language_name(language)} "
                             f"(--language {language}); use a multilingual model (--model base)")
        if task == "translate":
            raise UsageError(f"{model.name} is English-only: --task translate needs a multilingual model "
                             "(--model base)")
        return
    if language is not None and language not in model.tokenizer.language_codes:
        raise UsageError(f"{model.name} does not know {language_name(language)} (--language {language})")


def check_output_dir(path: str) -> Path:
    """The output folder, made now if missing: a file in its place, or no permission, fails before
    the work rather than after it."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {path}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--output-dir {path}: cannot create it ({err.strerror or err})") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"--output-dir {path}: not writable")
    return out


# the words for a file that is no audio, the same whether ffmpeg is installed or not
NOT_AUDIO = ("does not look like audio (no WAV, FLAC, OGG, MP3, M4A, WebM or AIFF header, and no audio stream "
             "that ffmpeg, where installed, can read)")


def check_input_file(path: str) -> None:
    """An input that exists, is a readable file and starts like audio (its header: WAV, FLAC,
    OGG, MP3, ..., :func:`susurrus.audio.sniff.sniff`; another when an installed ffmpeg finds
    audio in it, :func:`~susurrus.audio.sniff.ffmpeg_reads_audio`), or :class:`UsageError` saying
    what it is, in the same words with ffmpeg and without. Reads 16 bytes (and, for a file with
    no known header, runs ffmpeg over its start): no model, no PyTorch."""
    from susurrus.audio.sniff import HEAD_BYTES, ffmpeg_reads_audio, sniff

    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    if p.is_dir():
        raise UsageError(f"{path}: is a folder, not an audio file")
    try:
        with open(p, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror or err})") from None
    if not head:
        raise UsageError(f"{path}: the file is empty")
    if sniff(head) is None and not ffmpeg_reads_audio(path):
        raise UsageError(f"{path}: {NOT_AUDIO}")


def save_or_print(write: Callable[[Path], Any], target: Path, fallback: Callable[[], str]) -> bool:
    """Write a finished result to ``target``; if that fails, say so and print the result on
    stdout instead, so finished work is never lost to an output error. True when written."""
    try:
        write(target)
    except OSError as err:
        print(f"susurrus: cannot write {target} ({err.strerror or err}); the result follows on stdout",
              file=sys.stderr)
        sys.stdout.write(fallback())
        sys.stdout.flush()
        return False
    print(f"wrote {target}", file=sys.stderr)
    return True
