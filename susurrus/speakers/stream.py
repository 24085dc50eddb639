"""The stream's hook: label a step's committed words (``StreamSession.speakers``). A
``Committed`` event whose words change speaker is split at each change, so that each carries one
``speaker``; the words and their text are unchanged (labels only add)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from susurrus.streaming.events import Committed, Event, StreamWord, TurnEnded
from susurrus.streaming.vad import speech_fraction

if TYPE_CHECKING:
    from susurrus.streaming.session import StreamSession


def _split(words: list[StreamWord]) -> list[Committed]:
    runs: list[list[StreamWord]] = []
    for w in words:
        if runs and runs[-1][-1].speaker == w.speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    return [Committed(run, speaker=run[0].speaker) for run in runs]


def label_events(stream: StreamSession, events: list[Event], samples: np.ndarray | None) -> list[Event]:
    """Push ``samples`` (the audio this call fed) into the stream's tracker, then label the
    words that ``events`` commit and put the labelled words into ``stream.words``."""
    tracker = stream.speakers
    if samples is not None and len(samples):
        vad = stream.vad_state if stream.vad is not None else None
        voiced = (lambda a, b: speech_fraction(vad, a * 1000, b * 1000)) if vad is not None else None
        tracker.push(samples, voiced)
    fresh = [w for ev in events if isinstance(ev, Committed) for w in ev.words]
    if not fresh:
        return events
    labelled = {id(w): replace(w, speaker=s) for w, s in zip(fresh, tracker.label([(w.start, w.end) for w in fresh]),
                                                              strict=True)}
    committed = stream.words
    for i in range(len(committed) - 1, max(-1, len(committed) - 1 - 4 * len(labelled)), -1):
        committed[i] = labelled.get(id(committed[i]), committed[i])
    out: list[Event] = []
    for ev in events:
        if isinstance(ev, Committed):
            out.extend(_split([labelled[id(w)] for w in ev.words]))
        elif isinstance(ev, TurnEnded):
            out.append(replace(ev, words=[labelled.get(id(w), w) for w in ev.words]))
        else:
            out.append(ev)
    return out
