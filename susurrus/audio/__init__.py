"""Audio input: decoding and resampling (``io``), header sniffing (``sniff``, no PyTorch).

The names below are imported on first use (PEP 562), so that ``susurrus.audio.sniff`` and the
command line's argument checks do not pay for PyTorch."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SAMPLE_RATE", "AudioDecodeError", "decode_audio", "resample"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'susurrus.audio' has no attribute {name!r}")
    return getattr(importlib.import_module("susurrus.audio.io"), name)
