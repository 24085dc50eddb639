"""A stream whose committed words carry speakers: :class:`LabelledStream` is a
:class:`~susurrus.streaming.session.StreamSession` wrapped from above (``model.stream(diarize=True)``
makes one), its events labelled as they leave it, as a server or the command line would label
the events they read. The session knows nothing of speakers. A ``Committed`` event whose words
change speaker is split at each change, so that each carries one ``speaker``; the words and their
text are unchanged (labels only add)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from susurrus.streaming.calls import Steps, drive
from susurrus.streaming.events import Committed, Event, StreamWord, TurnEnded
from susurrus.streaming.frontend import stream_samples
from susurrus.streaming.session import StreamSession
from susurrus.streaming.vad import speech_fraction

if TYPE_CHECKING:
    from susurrus.speakers.tracker import SpeakerTracker


def _split(words: list[StreamWord]) -> list[Committed]:
    runs: list[list[StreamWord]] = []
    for w in words:
        if runs and runs[-1][-1].speaker == w.speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    return [Committed(run, speaker=run[0].speaker) for run in runs]


def label_events(stream: StreamSession, tracker: SpeakerTracker, events: list[Event],
                 samples: np.ndarray | None) -> list[Event]:
    """Push ``samples`` (the audio this call fed) into ``tracker``, then label the words that
    ``events`` commit and put the labelled words into ``stream.words``."""
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


class LabelledStream(StreamSession):
    """A stream whose committed words get speakers from ``tracker`` (a
    :class:`~susurrus.speakers.tracker.SpeakerTracker`): each call's events, batched or alone,
    pass through :func:`label_events` on their way out."""

    def __init__(self, *args: Any, tracker: SpeakerTracker, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tracker = tracker

    def _labelled(self, steps: Steps[list[Event]], samples: np.ndarray | None = None) -> Steps[list[Event]]:
        return label_events(self, self.tracker, (yield from steps), samples)

    def feed_steps(self, pcm: np.ndarray) -> Steps[list[Event]]:
        if self.finished:
            raise RuntimeError("stream already finished")
        samples = stream_samples(pcm)  # checked before anything is accepted, as the session's
        return self._labelled(self._feed_steps(samples), samples)

    def finish_steps(self) -> Steps[list[Event]]:
        return self._finish_steps() if self.finished else self._labelled(self._finish_steps())

    def flush(self) -> list[Event]:
        if self.finished:
            raise RuntimeError("stream already finished")
        return drive(self.net, self._labelled(self._flush()))
