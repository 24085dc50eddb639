"""Offline transcription as ``susurrus transcribe`` runs it, shared by the command and the REST
API (``rest.py``), so that both give the same text for the same file and settings.

:func:`transcribe_options` holds the command's defaults (beam search of 5, the temperature
fallback ladder, timestamps, previous-text conditioning); :func:`run` is the job itself, written
so that it can run in a worker process one window at a time (``WorkerPool.iterate``):
it yields the :class:`~susurrus.types.TranscriptionInfo`, then each segment as it is decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from susurrus.types import Segment, TranscriptionInfo

# the fallback ladder: decode at 0.0, and again hotter when the text is too repetitive or improbable
TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def transcribe_options(*, language: str | None = None, task: str = "transcribe", beam_size: int = 5,
                       temperature: float | None = None, word_timestamps: bool = False,
                       without_timestamps: bool = False, initial_prompt: str | None = None,
                       condition_on_previous_text: bool = True, vad: bool = True) -> dict[str, Any]:
    """``WhisperModel.transcribe`` options with ``susurrus transcribe``'s defaults; ``temperature``
    None is the fallback ladder, a number decodes at that temperature only; ``vad``: only the speech
    the voice activity gate finds is transcribed (``decoding/gate.py``)."""
    return {"language": language, "task": task, "beam_size": beam_size, "word_timestamps": word_timestamps,
            "without_timestamps": without_timestamps,
            "temperature": TEMPERATURES if temperature is None else temperature,
            "initial_prompt": initial_prompt, "condition_on_previous_text": condition_on_previous_text, "vad": vad}


def run(model: Any, samples: np.ndarray, options: dict[str, Any]) -> Iterator[TranscriptionInfo | Segment]:
    """The info, then every segment of ``samples`` (16 kHz mono), decoded one window at a time as
    they are asked for."""
    segments, info = model.transcribe(samples, **options)
    yield info
    yield from segments

