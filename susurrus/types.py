"""Plain result types shared by every stage: words, segments, transcription info."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Word:
    """One word with its audio time span in seconds and its probability."""

    start: float
    end: float
    word: str  # as Whisper spells it, with its leading space
    probability: float
    speaker: str | None = None  # with speaker labels (``diarize``)


@dataclass(frozen=True)
class Segment:
    """A stretch of transcript, as Whisper's timestamp tokens or its 30 s windows cut it."""

    id: int
    seek: int  # mel frame at which the window that produced it started
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    temperature: float
    words: list[Word] | None = None
    speaker: str | None = None  # with speaker labels (``diarize``): one speaker per segment


@dataclass(frozen=True)
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    task: str = "transcribe"
    all_language_probs: list[tuple[str, float]] | None = field(default=None, repr=False)
    duration_after_vad: float | None = None  # the audio left once the voice activity gate cut non-speech
