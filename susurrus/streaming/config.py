"""A stream's settings (:class:`StreamConfig`, the latency presets) and the constants the
streaming engine's decisions share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from susurrus.streaming.vad import SAMPLE_RATE, TurnConfig

FRAME_S = 0.02  # seconds per encoder frame
# a multilingual stream without a language decides it once the decoder gives one this probability
# (English dev items: 0.86-0.96 after 1.5 s; Swedish and Spanish are 0.2-0.3 guesses then, and
# wrong: they wait for detect_ms), and not before this much audio
DETECT_SURE = 0.8
DETECT_EARLIEST_S = 1.0
# the decoder has lost its place when, for LOST_STEPS steps in a row, its continuation reads the
# silence past the audio while LOST_SPEECH_S of possible speech follows the committed text (a
# word is under 1 s: that much unread speech is words skipped, not one being heard)
LOST_SPEECH_S = 1.5
LOST_STEPS = 2
RETRY_SPEECH_S = 0.5  # speech left 0.5 s past a window's last word that makes its last decode retry
# Whisper pads a window with digital silence: log-mel at the floor, 8 below the audio's maximum,
# normalised (floor + 4) / 4 = -0.7 for speech peaking at ~1.2 (dev and hard: 0.9-1.5; the
# streams do not change within -0.6..-0.9). A pad of normalised 0 (4 above the floor, what
# padding the normalised log-mel with zeros gives) reads as sound: base invented words in it
SILENCE_LEVEL = -0.7
SENTENCE_END = (".", "?", "!", "。", "？", "！")  # punctuation a sentence ends with
# the encoder look-ahead a stream's language sets when its setting leaves it open (``lookahead_ms``
# None, the presets but high): 1 s for English; 1.5 s for other languages and while a stream's
# language is not decided yet. A multilingual checkpoint hears its other languages less surely,
# and its frames need more of what follows to read as offline's: base on the multi set (58 items,
# five languages) 45.41 -> 43.26 % WER, its disagreement with offline 28.7 -> 24.6 %, every
# condition no worse; on English (dev, long-form) 1.5 s was no better than 1 s (docs/benchmarks.md)
LOOKAHEAD_MS = 1000
LOOKAHEAD_OTHER_MS = 1500
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # written without spaces between words


@dataclass(frozen=True)
class StreamConfig:
    chunk_ms: int = 640  # audio per step
    # the first step is this much shorter, so steps end at k * chunk_ms - step_phase_ms of the
    # audio. Where steps fall is arbitrary, and the text depends on it (the phase alone changes
    # a third of the hard set's texts, docs/benchmarks.md): `susurrus bench --phases` averages it
    step_phase_ms: int = 0
    # encoder frames kept provisional at the edge: re-encoded at every step, in both directions
    # with each other, so that a frame is final only once it has heard this much of what follows
    # (offline, Whisper hears it all: with 400 ms, hard speech lost 10 WER points to offline).
    # None: set by the stream's language (LOOKAHEAD_MS for English, LOOKAHEAD_OTHER_MS else)
    lookahead_ms: int | None = None
    # the first frames of the silence after the audio, encoded at each step as its continuation:
    # offline, Whisper's padding frames attend to the speech before them, and that is how the
    # decoder knows where speech ends (base: 7.4 -> 6.3 % WER on 13 dev items; the rest of the
    # 30 s is the encoder output of silence alone, computed once per model)
    silence_context_ms: int = 500
    commit_margin_ms: int = 500  # AlignAtt: commit tokens attending this far before the edge
    policy: str = "alignatt"  # or "agreement" (commit what two consecutive steps agree on)
    eot_guard: bool = True  # refuse end-of-text while speech remains after the last token
    max_window_s: float = 24.0  # re-anchor the window when it holds this much audio
    # a full window in the middle of speech rolls over keeping its committed words of the last
    # this many seconds (their audio and tokens) as the next window's start: the speech after
    # them is encoded and read with left context, as inside a window, not as a window's opening
    roll_context_s: float = 2.0
    context_tokens: int = 96  # previous committed tokens given as the prompt
    max_step_tokens: int = 32  # tokens decoded per step at most
    reuse_prefix: bool = True  # keep the forced prefix's decoder keys/values between steps
    first_commit_ms: int = 1500  # commit nothing until the window holds this much audio
    stall_s: float = 8.0  # re-anchor when nothing was committed for this long after committed text
    confident_prob: float = 0.5  # tokens less likely than this need ...
    uncertain_margin_ms: int = 1500  # ... this margin instead (more right context to settle)
    first_margin_ms: int = 1000  # commit margin until the window's first commit (opening words need context)
    opening_agreement: bool = True  # ... and two consecutive steps must agree on them
    # ... and the window's audio so far is read again in both directions: words that reading has
    # in front of the stream's opening, and the stream lost, are committed first (opening.py)
    opening_check: bool = True
    interim_edge_ms: int = 200  # stop decoding at tokens read this close to the audio edge (they change)
    reread_frames: int = 25  # stop at a new word read this many encoder frames (20 ms) before the last one
    vad: bool = True  # Silero VAD: no compute in non-speech, no text over it
    vad_threshold: float = 0.5  # a 32 ms frame is speech when its probability reaches this (turns)
    # ... and may be speech at this: the gate wakes and stays awake on such frames, and the guard
    # counts them as speech. Silero gives whispered or creaky speech 0.15-0.5 where noise and
    # music stay under 0.05 (docs/journal/2026-12.md, "What changed, and why"): the gate saves
    # compute, it must not delete words
    wake_threshold: float = 0.15
    idle_after_ms: int = 1000  # no speech for this long: flush the window and stop computing
    resume_pad_ms: int = 500  # audio kept before speech that resumes after idling
    hallucination_guard: bool = True  # drop committed text over non-speech / known phrases over weak speech
    turns: TurnConfig | None = None  # server_vad turn detection (speech started/stopped, a flush per turn)
    semantic_turns: bool = False  # end turns sooner after a sure sentence end, later when the text trails off
    detect_ms: int = 3000  # multilingual without a language: audio heard before detecting it
    language: str | None = None
    task: str = "transcribe"
    # text the decoder is conditioned on, as Whisper's initial prompt offline (names, terms,
    # style); unlike the text so far it is kept in every window's prompt, loops and stalls too
    prompt: str | None = None
    # speaker labels on committed words, a server session's ``susurrus.speakers.settings.Diarization``
    # (None for none): ``WhisperModel.stream`` reads it and wraps the stream from above (``speakers/``)
    diarization: Any = None

    @property
    def gate_threshold(self) -> float:
        """The probability at which a VAD frame may be speech: the gate and the guards use it."""
        return min(self.wake_threshold, self.vad_threshold)

    @property
    def step_samples(self) -> int:
        """The audio of one step (``chunk_ms``) in 16 kHz samples."""
        return self.chunk_ms * SAMPLE_RATE // 1000

    @property
    def phase_samples(self) -> int:
        """How much shorter the first step is (``step_phase_ms``), in 16 kHz samples."""
        return self.step_phase_ms * SAMPLE_RATE // 1000

    def __post_init__(self) -> None:
        if self.policy not in ("alignatt", "agreement"):
            raise ValueError(f"policy must be 'alignatt' or 'agreement', not {self.policy!r}")
        if not 20 <= self.chunk_ms <= 5000:
            raise ValueError(f"chunk_ms must be within 20..5000, not {self.chunk_ms}")
        if not 0 <= self.step_phase_ms < self.chunk_ms:
            raise ValueError(f"step_phase_ms must be within 0..{self.chunk_ms - 1} (less than chunk_ms), "
                             f"not {self.step_phase_ms}")
        if self.lookahead_ms is not None and not 0 <= self.lookahead_ms <= 5000:
            raise ValueError(f"lookahead_ms must be within 0..5000, not {self.lookahead_ms}")
        if not 0 <= self.silence_context_ms <= 5000:
            raise ValueError(f"silence_context_ms must be within 0..5000, not {self.silence_context_ms}")
        if not 5.0 <= self.max_window_s <= 28.0:
            raise ValueError(f"max_window_s must be within 5..28 s, not {self.max_window_s}")
        if not 0.0 <= self.roll_context_s <= self.max_window_s / 2:
            raise ValueError(f"roll_context_s must be within 0..{self.max_window_s / 2:g} s (half of max_window_s), "
                             f"not {self.roll_context_s}")
        if not 0.0 < self.vad_threshold < 1.0:
            raise ValueError(f"vad_threshold must be within (0, 1), not {self.vad_threshold}")
        if not 0.0 < self.wake_threshold < 1.0:
            raise ValueError(f"wake_threshold must be within (0, 1), not {self.wake_threshold}")
        if self.idle_after_ms < 200:
            raise ValueError(f"idle_after_ms must be at least 200, not {self.idle_after_ms}")


PRESETS: dict[str, StreamConfig] = {
    "low": StreamConfig(chunk_ms=320, commit_margin_ms=500),
    "medium": StreamConfig(),
    "high": StreamConfig(chunk_ms=960, lookahead_ms=1500, commit_margin_ms=800),
}


def lookahead_for(config: StreamConfig, language: str | None) -> int:
    """The encoder look-ahead of a stream with ``config`` in ``language`` (None: not decided yet)."""
    if config.lookahead_ms is not None:
        return config.lookahead_ms
    return LOOKAHEAD_MS if language == "en" else LOOKAHEAD_OTHER_MS


def lookahead_label(config: StreamConfig) -> str:
    """``config``'s look-ahead for tables: its milliseconds, or "auto" where the language sets it."""
    return "auto" if config.lookahead_ms is None else str(config.lookahead_ms)


def stream_config(latency: str | None = None, **overrides) -> StreamConfig:
    """A preset (low/medium/high) with explicit settings overriding it."""
    name = latency or "medium"
    if name not in PRESETS:
        raise ValueError(f"latency must be one of {sorted(PRESETS)}, not {latency!r}")
    turns = overrides.get("turns")
    if turns is True:
        overrides["turns"] = TurnConfig()  # server_vad's defaults
    elif turns is False:
        overrides["turns"] = None
    elif turns is not None and not isinstance(turns, TurnConfig):
        raise ValueError(f"turns must be True, False, a TurnConfig or None, not {turns!r}")
    return replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})
