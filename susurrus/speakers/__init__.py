"""Who spoke: speaker labels for streams and files.

``encoder`` (Resemblyzer's GE2E network), ``cluster`` (online and offline clustering),
``tracker`` (a stream's embeddings and word labels), ``stream`` (the session's hook),
``references`` (enrolment clips), ``conversations`` + ``bench`` (the benchmark) and
``threshold`` (measuring the same-speaker threshold)."""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike

import numpy as np

from susurrus.speakers.cluster import SAME_SPEAKER, SpeakerConfig
from susurrus.speakers.references import SpeakerReferenceError, load_reference, parse_reference_args
from susurrus.speakers.tracker import SpeakerTracker

__all__ = ["SAME_SPEAKER", "SpeakerConfig", "SpeakerReferenceError", "SpeakerTracker", "load_reference",
           "make_tracker", "parse_reference_args"]


def make_tracker(speakers: int | None = None, min_speakers: int | None = None, max_speakers: int | None = None,
                 refs: Mapping[str, str | PathLike | np.ndarray] | None = None,
                 keep_all: bool = False) -> SpeakerTracker:
    """A tracker for one stream or file; ``refs``: name -> clip path or 16 kHz samples (or an
    embedding already computed, 256 values)."""
    config = SpeakerConfig(speakers=speakers, min_speakers=min_speakers or 1, max_speakers=max_speakers)
    embeddings = {name: load_reference(name, clip) for name, clip in (refs or {}).items()}
    if config.max_speakers is not None and len(embeddings) > config.max_speakers:
        raise ValueError(f"{len(embeddings)} enrolled speakers but at most {config.max_speakers} speakers")
    return SpeakerTracker(config, embeddings, keep_all=keep_all)
