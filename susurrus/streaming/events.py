"""What a stream reports: committed words, the interim guess, turns, the detected language, and
per-step statistics."""

from __future__ import annotations

from dataclasses import dataclass

from susurrus.streaming.vad import SpeechStarted, SpeechStopped


@dataclass(frozen=True)
class StreamWord:
    word: str  # with its leading space, as Whisper writes it
    start: float  # seconds of stream audio
    end: float
    emitted_at: float  # seconds of audio fed when it was committed
    probability: float
    speaker: str | None = None  # "S1", "S2", ... or an enrolled name (``diarize``); None without


@dataclass(frozen=True)
class Committed:
    """Words that became final. Never revised. With ``diarize``, all of one ``speaker``."""

    words: list[StreamWord]
    speaker: str | None = None

    @property
    def text(self) -> str:
        return "".join(w.word for w in self.words)


@dataclass(frozen=True)
class Interim:
    """The current guess for the audio after the committed words; replaced by the next one."""

    text: str
    audio_time: float


@dataclass(frozen=True)
class TurnEnded:
    """A speech turn closed (``turns`` set): everything said in it is committed."""

    text: str
    words: list[StreamWord]
    audio_start_ms: int  # as the SpeechStarted that opened it (onset minus prefix padding)
    audio_end_ms: int  # as the SpeechStopped that closed it


@dataclass(frozen=True)
class LanguageDetected:
    """A multilingual stream without a fixed language picked one for the speech that follows."""

    language: str
    probability: float
    audio_time: float


Event = Committed | Interim | SpeechStarted | SpeechStopped | TurnEnded | LanguageDetected


@dataclass
class StepStats:
    audio_time: float
    compute_s: float  # wall-clock seconds of the step
    cpu_s: float  # CPU seconds of the calling thread (what the step cost, whatever else runs)
    encoded_frames: int
    decoded_tokens: int
