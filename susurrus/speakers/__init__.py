"""Who spoke: speaker labels for streams and files.

``encoder`` (the speaker encoders: ``campplus``, CAM++, the default; Resemblyzer's GE2E),
``cluster`` (online and offline clustering), ``tracker`` (a stream's embeddings and word
labels), ``stream`` (the session's hook), ``offline`` (a whole file), ``references`` (enrolment
clips), ``options`` (the command line), ``conversations`` + ``bench`` (the benchmark) and
``threshold`` (measuring the same-speaker threshold). Importing this package loads nothing
heavy; the encoder loads on first use."""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from susurrus.speakers.tracker import SpeakerTracker

__all__ = ["make_tracker", "parse_reference_args"]


def parse_reference_args(values: list[str] | None) -> dict[str, str]:
    """``["NAME=clip.wav", ...]`` -> ``{NAME: clip.wav}`` (see :mod:`~susurrus.speakers.references`)."""
    from susurrus.speakers.references import parse_reference_args as parse

    return parse(values)


def make_tracker(speakers: int | None = None, min_speakers: int | None = None, max_speakers: int | None = None,
                 refs: Mapping[str, str | PathLike | Any] | None = None,
                 keep_all: bool = False, encoder: str | None = None) -> SpeakerTracker:
    """A tracker for one stream or file; ``refs``: name -> clip path or 16 kHz samples (or an
    embedding already computed by the same encoder: 192 values for CAM++, 256 for GE2E).
    ``encoder``: "campplus" (the default, :mod:`~susurrus.speakers.campplus`) or "ge2e"
    (Resemblyzer's: about a third less CPU, voices less well separated). Bad counts, clips or
    encoder names raise ``ValueError``."""
    from susurrus.speakers.cluster import SpeakerConfig
    from susurrus.speakers.encoder import DEFAULT_ENCODER
    from susurrus.speakers.references import load_reference
    from susurrus.speakers.tracker import SpeakerTracker

    encoder = encoder or DEFAULT_ENCODER
    config = SpeakerConfig(speakers=speakers, min_speakers=min_speakers or 1, max_speakers=max_speakers,
                           encoder=encoder)
    if config.max_speakers is not None and len(refs or {}) > config.max_speakers:
        raise ValueError(f"{len(refs or {})} enrolled speakers but at most {config.max_speakers} speakers")
    embeddings = {name: load_reference(name, clip, encoder) for name, clip in (refs or {}).items()}
    from susurrus.speakers.encoder import load

    load(encoder)  # loaded now (once a process), not at the stream's first voiced window
    return SpeakerTracker(config, embeddings, keep_all=keep_all)
