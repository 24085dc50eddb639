"""The voice activity gate of offline transcription: only speech reaches Whisper.

Whisper reads speech into silence and noise ("You", "Thank you.", subtitle credits), so, as
faster-whisper's ``vad_filter`` does, the audio is first cut to its speech: Silero VAD reads the
whole file as the stream's gate reads a stream (the same frames, the same amplified readings of
quiet audio, the same threshold: ``StreamConfig.gate_threshold``, at which whispers and creaky
voices still count), and every stretch of frames that may be speech is kept with padding around
it, as the stream keeps audio around speech: ``pad_before_ms`` before it (the stream's
``resume_pad_ms``: word onsets, which Silero hears late) and ``pad_after_ms`` after it (its
``idle_after_ms``: word tails and short pauses). Stretches whose padding meets are one, and so
are stretches less than ``min_cut_ms`` apart (and a file's first and last stretch are kept to its
edges when they are that close): cutting so little out removes nothing Whisper could read speech
into, and only changes what it hears. Every cut falls on the mel hop (10 ms) of the original
audio, so each kept stretch is framed exactly as the whole file is: a cut 12 ms into a file once
shifted every frame of an 11 s item and turned its greedy reading into a loop. The
kept stretches are transcribed as one audio, and every time in the result (segments, words) is
mapped back to the original audio's time base. Audio without speech gives no segment at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from susurrus.streaming.vad import FRAME_MS, SileroVad, VadState, push_vad
from susurrus.types import Segment, TranscriptionInfo, Word

SAMPLE_RATE = 16000
THRESHOLD = 0.15  # StreamConfig().gate_threshold: the stream's gate wakes at this probability
PAD_BEFORE_MS = 500  # StreamConfig().resume_pad_ms
PAD_AFTER_MS = 1000  # StreamConfig().idle_after_ms
MIN_CUT_MS = 1000  # a shorter stretch of non-speech is not cut out (it is no silence to read speech into)
HOP = 160  # the mel hop: every cut is on a frame boundary of the original audio
_READ_S = 60  # the VAD reads a long file a minute at a time (bounded memory)


def speech_probabilities(vad: SileroVad, audio: np.ndarray) -> np.ndarray:
    """Silero's probability for every 32 ms frame of ``audio`` (16 kHz), read as a stream."""
    state = VadState()
    parts = []
    step = _READ_S * SAMPLE_RATE
    for at in range(0, max(1, len(audio)), step):
        parts.append(push_vad(vad, state, audio[at:at + step], final=at + step >= len(audio)))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def speech_spans(probs: np.ndarray, n_samples: int, threshold: float = THRESHOLD,
                 pad_before_ms: int = PAD_BEFORE_MS, pad_after_ms: int = PAD_AFTER_MS,
                 min_cut_ms: int = MIN_CUT_MS) -> list[tuple[int, int]]:
    """The stretches of ``n_samples`` of audio to transcribe, ``[(start, end)]`` in samples:
    every frame whose probability reaches ``threshold``, padded; stretches less than
    ``min_cut_ms`` apart (or from the file's edge) joined; every start and end on the mel hop."""
    spans: list[tuple[int, int]] = []
    frame = FRAME_MS * SAMPLE_RATE // 1000
    before, after = pad_before_ms * SAMPLE_RATE // 1000, pad_after_ms * SAMPLE_RATE // 1000
    least = min_cut_ms * SAMPLE_RATE // 1000
    for i in np.flatnonzero(probs >= threshold):
        start = max(0, (int(i) * frame - before) // HOP * HOP)
        end = min(n_samples, -(-((int(i) + 1) * frame + after) // HOP) * HOP)
        if spans and start < spans[-1][1] + least:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    if spans and spans[0][0] < least:
        spans[0] = (0, spans[0][1])
    if spans and n_samples - spans[-1][1] < least:
        spans[-1] = (spans[-1][0], n_samples)
    return [(a, b) for a, b in spans if b > a]


@dataclass(frozen=True)
class TimeMap:
    """Times in the kept audio (the spans one after another) to times in the original."""

    spans: tuple[tuple[int, int], ...]

    def original(self, t: float, end: bool = False) -> float:
        """Seconds ``t`` of the kept audio in the original; ``end``: a time that ends something,
        which at a join belongs to the span before it."""
        at = 0.0
        for i, (a, b) in enumerate(self.spans):
            length = (b - a) / SAMPLE_RATE
            last = i == len(self.spans) - 1
            if t < at + length or (end and t <= at + length) or last:
                return round(a / SAMPLE_RATE + min(max(t - at, 0.0), length), 3)
            at += length
        return round(t, 3)

    def segment(self, s: Segment) -> Segment:
        words = None if s.words is None else [
            Word(self.original(w.start), self.original(w.end, end=True), w.word, w.probability) for w in s.words]
        start = self.original(s.start)
        return replace(s, start=start, end=max(start, self.original(s.end, end=True)),
                       seek=round(self.original(s.seek / 100) * 100), words=words)


def keep_speech(audio: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """The spans of ``audio`` one after another."""
    if not spans:
        return np.zeros(0, dtype=np.float32)
    return np.ascontiguousarray(np.concatenate([audio[a:b] for a, b in spans]), dtype=np.float32)


def mapped(segments: Iterator[Segment], times: TimeMap) -> Iterator[Segment]:
    """``segments`` of the kept audio with the original's times, still lazy."""
    for s in segments:
        yield times.segment(s)


def gated_info(info: TranscriptionInfo, duration: float, kept: float) -> TranscriptionInfo:
    """``info`` of the kept audio, with the original's duration and how much of it was kept."""
    return replace(info, duration=duration, duration_after_vad=round(kept, 3))
