"""susurrus: live speech-to-text with Whisper, incremental from the audio up.

The names below are imported on first use (PEP 562), so ``import susurrus`` and the command
line's ``--help`` do not pay for PyTorch until a model is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from susurrus.api import WhisperModel, load_model
    from susurrus.streaming.session import Committed, Interim, StreamConfig, StreamSession, StreamWord
    from susurrus.types import Segment, TranscriptionInfo, Word

__version__ = "0.1.0"

_WHERE = {
    "WhisperModel": "susurrus.api", "load_model": "susurrus.api",
    "Committed": "susurrus.streaming.session", "Interim": "susurrus.streaming.session",
    "StreamConfig": "susurrus.streaming.session", "StreamSession": "susurrus.streaming.session",
    "StreamWord": "susurrus.streaming.session",
    "Segment": "susurrus.types", "TranscriptionInfo": "susurrus.types", "Word": "susurrus.types",
}

__all__ = ["Committed", "Interim", "Segment", "StreamConfig", "StreamSession", "StreamWord", "TranscriptionInfo",
           "Word", "WhisperModel", "example_audio", "load_model"]


def example_audio() -> str:
    """The path of the example clip shipped with the package: 11 s of JFK's inaugural address
    (public domain, 16 kHz mono FLAC), "And so, my fellow Americans, ask not what your country can
    do for you, ask what you can do for your country." (``susurrus example`` prints it)."""
    from pathlib import Path

    return str(Path(__file__).resolve().parent / "data" / "jfk.flac")


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'susurrus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
