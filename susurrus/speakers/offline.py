"""Speaker labels for a whole file (``susurrus transcribe --diarize``, REST ``diarized_json``):
the stream's embeddings (1.6 s windows of voiced audio at the encoder's hop) clustered all at once
(agglomerative, :func:`~susurrus.speakers.cluster.cluster_offline`), each word labelled as a
stream labels it, and segments split where the speaker changes (their words' texts unchanged)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from susurrus.speakers.tracker import SpeakerTracker
from susurrus.types import Segment


def file_voiced(audio: np.ndarray):
    """The file's Silero VAD as the tracker reads it: (start_s, end_s) -> speech fraction."""
    from susurrus.streaming.vad import VadState, load_vad, push_vad, speech_fraction

    state = VadState(history_frames=len(audio) // 512 + 10)
    push_vad(load_vad(), state, audio, final=True)
    return lambda a, b: speech_fraction(state, a * 1000, b * 1000)


def diarize_segments(audio: np.ndarray, segments: Sequence[Segment], tracker: SpeakerTracker) -> list[Segment]:
    """``segments`` (with word timestamps) labelled and split at speaker changes. ``tracker``
    made with ``keep_all=True``."""
    tracker.push(audio, file_voiced(audio))
    words = [(i, w) for i, s in enumerate(segments) for w in (s.words or [])]
    labels = tracker.label_offline([(w.start, w.end) for _, w in words])
    by_seg: dict[int, list] = {}
    for (i, w), lab in zip(words, labels, strict=True):
        by_seg.setdefault(i, []).append(replace(w, speaker=lab))
    out: list[Segment] = []
    for i, seg in enumerate(segments):
        ws = by_seg.get(i)
        if not ws:
            out.append(replace(seg, id=len(out)))
            continue
        runs: list[list] = []
        for w in ws:
            if runs and runs[-1][-1].speaker == w.speaker:
                runs[-1].append(w)
            else:
                runs.append([w])
        if len(runs) == 1:
            out.append(replace(seg, id=len(out), words=ws, speaker=ws[0].speaker))
            continue
        for run in runs:
            out.append(replace(seg, id=len(out), start=run[0].start, end=run[-1].end,
                               text="".join(w.word for w in run), words=run, speaker=run[0].speaker))
    return out
