"""Voice activity: incremental Silero VAD, OpenAI-style speech turns, end-of-turn from text.

Three layers, each a pure function over explicit state, as the rest of ``streaming/``:

1. :func:`push_vad` runs Silero VAD (the ONNX model the ``silero-vad`` package ships, run
   with onnxruntime on one thread; nothing is downloaded) over 512-sample (32 ms) frames at
   16 kHz. Frame ``i`` covers samples ``[512 i, 512 (i + 1))``. Audio may arrive in pieces of
   any size: the probabilities are the same however the stream is cut. The state keeps the
   network's recurrent state, the 64-sample context the model reads before each frame, the
   sample remainder and a bounded history of recent probabilities (flat memory). Inside a
   stream's step, :func:`push_vad_steps` yields the frames as a :class:`VadFrames` call, so
   that many streams' frames run together (:meth:`SileroVad.frames_together`); a stream's
   frames of a step are one call of Silero's sequence export where the package ships it.
2. :func:`push_turn` turns probabilities into ``SpeechStarted`` / ``SpeechStopped`` events with
   the semantics of OpenAI's realtime ``server_vad``: speech starts at the first frame whose
   probability reaches ``threshold``; ``audio_start_ms`` includes ``prefix_padding_ms`` before
   it (clamped at 0); speech stops once ``silence_duration_ms`` of frames below the threshold
   follow the last speech frame, and ``audio_end_ms`` is, as OpenAI documents it, the audio
   time at which that was decided, so it *includes* the silence duration. The raw speech onset
   and end are reported too (``speech_start_ms``, ``speech_end_ms``).
3. :func:`text_turn_silence_ms` (semantic-VAD spirit): how much silence should end a turn given
   the text transcribed so far and how sure the recogniser was of its sentence end: less after a
   sure one, more when the text trails off.

:func:`is_speech_padded` and :func:`speech_fraction` read the probability history for compute
gating and for the hallucination guard (``streaming/hallucination.py``).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512  # Silero VAD's frame at 16 kHz
FRAME_MS = 32  # FRAME_SAMPLES / 16 kHz
CONTEXT_SAMPLES = 64  # samples of the previous frame the model reads before each frame
# Silero's speech probabilities depend on the level it hears: clean speech fades below a peak of
# about -40 dBFS (none below -65, where Whisper still reads it: the English dev items at a -60 dBFS
# peak, tiny.en offline 7.7 % WER, streamed 4 of 49 empty), speech in noise far sooner (hard's
# 0 dB SNR items: 58-71 % of frames speech at their own peak of about -6 dBFS, 0-21 % at -20, none
# at -30; streamed at -30, two of five came out empty with the gate open: the hallucination guard
# found no speech under their words). So the VAD also reads a stream amplified by each of
# VAD_GAINS, each reading on a recurrent state of its own from the stream's first sound, for as
# long as that gain keeps the stream's peak so far within full scale; a frame is as likely speech
# as the likeliest reading says. A stream that peaks at -12 dBFS or above is read once. The gains
# are fixed, not set from the peak so far: Silero's state follows the level it hears, and a
# reading whose gain stepped down as the peak rose heard what followed as far less likely speech
# (a state started afresh at the new gain in the middle of speech too); one reading of the
# stream itself stays for the same reason (a whisper after an amplified lead-in, read on one
# state, was lost). 36 dB at most: digital near-silence stays silence.
VAD_GAINS = (4.0, 16.0, 64.0)  # 12, 24 and 36 dB
SEQUENCE_MODEL = "silero_vad_16k_sequence.onnx"  # many frames of one stream per call (silero-vad >= 6.2.3)
SEQUENCE_CALL_FRAMES = 512  # frames per call of it at most (16 s of audio; a step has ~20)


def silero_model_path(name: str = "silero_vad.onnx") -> Path:
    """The model file ``name`` inside the installed ``silero-vad`` package.

    Found without importing the package: ``silero_vad.model`` calls ``torch.set_num_threads(1)``
    at import time, which would silently slow down Whisper in the same process."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("silero-vad is not installed (pip install silero-vad)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not found in the silero-vad package")
    return path


class SileroVad:
    """The Silero VAD network (ONNX), loaded once and shared by any number of streams.

    It holds no per-stream state: everything that changes lives in :class:`VadState`.
    ``onnxruntime.InferenceSession.run`` is thread-safe, so streams on several threads can
    share one instance.

    A stream's frames run in one call of the sequence export the package ships beside the
    per-frame model (``silero_vad_16k_sequence.onnx``, silero-vad >= 6.2.3): the same network,
    its convolutions over all the frames at once and its LSTM along them, ~46 µs a frame in
    calls of 20 frames against ~100 µs a frame one call each (``tests/test_vad.py`` checks that
    its probabilities and state are bit-identical to the per-frame model's on real speech). Where
    the package lacks it, the per-frame model runs frame by frame, and many streams' frames as
    one batch per frame index (:meth:`frames_together`)."""

    def __init__(self, path: str | Path | None = None, threads: int = 1, sequence: bool = True):
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.path = Path(path) if path is not None else silero_model_path()
        self.session = onnxruntime.InferenceSession(str(self.path), sess_options=opts,
                                                    providers=["CPUExecutionProvider"])
        self.sequence = None  # the sequence export, when it is there (and ``path`` was not given)
        if sequence and path is None:
            try:
                self.sequence = onnxruntime.InferenceSession(str(silero_model_path(SEQUENCE_MODEL)), sess_options=opts,
                                                             providers=["CPUExecutionProvider"])
            except FileNotFoundError:
                pass
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def frame(self, x: np.ndarray, rnn: np.ndarray) -> tuple[float, np.ndarray]:
        """One frame through the per-frame model: ``x`` is (1, 64 + 512) samples (context then
        frame); returns (prob, rnn)."""
        out, rnn = self.session.run(None, {"input": x, "state": rnn, "sr": self._sr})
        return float(out[0, 0]), rnn

    def frames(self, inputs: np.ndarray, rnn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One stream's frames in order: ``inputs`` (n, 64 + 512) as :func:`frame_inputs` makes
        them, ``rnn`` its recurrent state (2, 1, 128), LSTM's h then c; returns (probabilities
        (n,), rnn)."""
        if self.sequence is not None:
            out = np.empty(len(inputs), dtype=np.float32)
            h, c = np.ascontiguousarray(rnn[:1]), np.ascontiguousarray(rnn[1:])
            for at in range(0, len(inputs), SEQUENCE_CALL_FRAMES):  # memory bounded however much audio comes at once
                x = np.ascontiguousarray(inputs[at:at + SEQUENCE_CALL_FRAMES], dtype=np.float32)
                probs, h, c = self.sequence.run(None, {"input": x, "h": h, "c": c})
                out[at:at + len(x)] = probs.reshape(-1)
            return out, np.concatenate([h, c])
        out = np.empty(len(inputs), dtype=np.float32)
        for i in range(len(inputs)):
            out[i], rnn = self.frame(inputs[i:i + 1], rnn)
        return out, rnn

    def run(self, rows: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`frames` of each row (inputs, rnn): one row alone, several together."""
        return [self.frames(*rows[0])] if len(rows) == 1 else self.frames_together(rows)

    def frames_together(self, rows: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Many streams' :meth:`frames` (a Lockstep round's). With the sequence export, each
        stream's frames are one call (as cheap per frame as the per-frame model's batch of 32
        streams). Without it, the i-th frames of every stream that has one run as one batch (the
        network is recurrent along a stream, never across streams), ~half as much per frame at
        32 streams as the streams one by one. Either way each row's results are bit-identical to
        its own :meth:`frames` (``tests/test_vad.py`` checks it on real speech)."""
        if self.sequence is not None:
            return [self.frames(*row) for row in rows]
        outs = [np.empty(len(inputs), dtype=np.float32) for inputs, _ in rows]
        state = np.concatenate([rnn for _, rnn in rows], axis=1)
        for i in range(max((len(inputs) for inputs, _ in rows), default=0)):
            live = [j for j, (inputs, _) in enumerate(rows) if len(inputs) > i]
            x = np.stack([rows[j][0][i] for j in live])
            h = np.ascontiguousarray(state[:, live])
            out, new = self.session.run(None, {"input": x, "state": h, "sr": self._sr})
            state[:, live] = new
            for k, j in enumerate(live):
                outs[j][i] = out[k, 0]
        return [(out, state[:, j:j + 1].copy()) for j, out in enumerate(outs)]


@dataclass
class VadFrames:
    """A stream's VAD frames as a model call (:mod:`~susurrus.streaming.calls`): ``rows``, the
    frames as they are and each amplified reading of them, ``(inputs (n, 64 + 512), rnn)``
    through ``vad``, each from its own recurrent state; result: ``[(probs (n,), rnn)]`` per row.
    Run alone with :meth:`SileroVad.run` (a stream's readings as one batch), with other
    streams' with :meth:`SileroVad.frames_together`."""

    vad: SileroVad
    rows: list[tuple[np.ndarray, np.ndarray]]


def load_vad(threads: int = 1) -> SileroVad:
    """Load Silero VAD from the ``silero-vad`` package (no network)."""
    return SileroVad(threads=threads)


@dataclass
class VadState:
    """What the VAD keeps between calls for one stream.

    ``probs`` holds the probabilities of frames ``probs_start .. frames_done - 1`` (at most
    about ``2 * history_frames`` of them, at least the last ``history_frames``)."""

    history_frames: int = 1875  # 60 s of probabilities kept for look-ups
    rnn: np.ndarray = field(default_factory=lambda: fresh_rnn())
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT_SAMPLES, dtype=np.float32))
    remainder: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    frames_done: int = 0  # frames analysed since the stream started
    peak: float = 0.0  # the largest sample magnitude of those frames
    gained: dict[int, np.ndarray] = field(default_factory=dict)  # VAD_GAINS[k]'s reading's state, while read
    probs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    probs_start: int = 0  # absolute frame index of probs[0]

    @property
    def audio_ms(self) -> int:
        """Audio analysed so far (whole frames), in milliseconds."""
        return self.frames_done * FRAME_MS


def frame_inputs(state: VadState, samples: np.ndarray, final: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The network inputs of the frames ``samples`` complete after what ``state`` holds: (n,
    64 + 512), each frame behind the 64 samples before it; and the samples left over for the
    next call. With ``final`` a last partial frame is padded with zeros. ``state`` is not
    changed (:func:`record_frames` does that once the frames have run)."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    buf = np.concatenate([state.remainder, samples]) if len(state.remainder) else samples
    n = len(buf) // FRAME_SAMPLES
    if final and len(buf) % FRAME_SAMPLES:
        buf = np.concatenate([buf, np.zeros(FRAME_SAMPLES - len(buf) % FRAME_SAMPLES, dtype=np.float32)])
        n += 1
    inputs = np.empty((n, CONTEXT_SAMPLES + FRAME_SAMPLES), dtype=np.float32)
    if n:
        inputs[:, CONTEXT_SAMPLES:] = buf[:n * FRAME_SAMPLES].reshape(n, FRAME_SAMPLES)
        inputs[0, :CONTEXT_SAMPLES] = state.context
        inputs[1:, :CONTEXT_SAMPLES] = inputs[:-1, -CONTEXT_SAMPLES:]
    return inputs, buf[n * FRAME_SAMPLES:].copy()


def live_rows(state: VadState, inputs: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Per gain of ``VAD_GAINS`` (by index) read for some frames of :func:`frame_inputs`:
    those frames. A gain is read from the stream's first sound for as long as it keeps the
    stream's peak so far within full scale, and only while at most one larger gain does too
    (the larger ones are the louder readings; the next one down has the history to take over
    when the loudest one stops): a run of frames. A frame's readings depend on the samples up
    to it alone, so they stay the same however the stream is cut."""
    if not len(inputs) or state.peak * VAD_GAINS[0] > 1.0:
        return []
    frame_peaks = np.abs(inputs[:, CONTEXT_SAMPLES:]).max(axis=1)
    peaks = np.maximum.accumulate(np.maximum(frame_peaks, state.peak))
    out = []
    for k, gain in enumerate(VAD_GAINS):
        read = (peaks > 0.0) & (peaks <= 1.0 / gain)  # (a product would overflow on absurd input)
        if k + 2 < len(VAD_GAINS):
            read &= peaks > 1.0 / VAD_GAINS[k + 2]
        if read.any():
            out.append((k, np.flatnonzero(read)))
    return out


def fresh_rnn() -> np.ndarray:
    """Silero's recurrent state before any frame."""
    return np.zeros((2, 1, 128), dtype=np.float32)


def record_frames(state: VadState, inputs: np.ndarray, left: np.ndarray, probs: np.ndarray,
                  rnn: np.ndarray, gained: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Keep what the frames of :func:`frame_inputs` gave (their probabilities, the recurrent
    states after them, their peak) and the samples left over in ``state``; returns ``probs``."""
    n = len(inputs)
    state.rnn = rnn
    if n:
        state.context = inputs[-1, -CONTEXT_SAMPLES:].copy()
        state.peak = max(state.peak, float(np.abs(inputs[:, CONTEXT_SAMPLES:]).max()))
    state.gained.update(gained or {})
    state.gained = {k: h for k, h in state.gained.items() if state.peak * VAD_GAINS[k] <= 1.0}
    state.remainder = left
    state.frames_done += n
    if n:
        state.probs = np.concatenate([state.probs, probs])
        if len(state.probs) > 2 * state.history_frames:  # trim rarely: amortised O(1) per frame
            drop = len(state.probs) - state.history_frames
            state.probs = state.probs[drop:].copy()
            state.probs_start += drop
    return probs


def push_vad(vad: SileroVad, state: VadState, samples: np.ndarray, final: bool = False) -> np.ndarray:
    """Feed 16 kHz samples; return the speech probabilities of the frames they complete.

    Updates ``state``. With ``final`` the stream is over and a last partial frame is padded
    with zeros (so ``frames_done * 512`` may then exceed the samples fed)."""
    steps = push_vad_steps(vad, state, samples, final)
    try:
        call = next(steps)
        while True:
            call = steps.send(vad.run(call.rows))
    except StopIteration as done:
        return done.value


def push_vad_steps(vad: SileroVad, state: VadState, samples: np.ndarray,
                   final: bool = False) -> Generator[VadFrames, Any, np.ndarray]:
    """:func:`push_vad` as a generator that yields its frames as a :class:`VadFrames` call
    (none when the samples complete no frame; with a row per amplified reading of a stream that
    has not peaked at -12 dBFS, :func:`live_rows`), so that many streams' frames run together."""
    inputs, left = frame_inputs(state, samples, final)
    gained: dict[int, np.ndarray] = {}
    if len(inputs):
        live = live_rows(state, inputs)
        amplified = [(inputs[rows] * np.float32(VAD_GAINS[k]), state.gained.get(k, fresh_rnn())) for k, rows in live]
        (probs, rnn), *readings = yield VadFrames(vad, [(inputs, state.rnn), *amplified])
        if live:
            probs = probs.copy()
        for (k, rows), (heard, h) in zip(live, readings):
            probs[rows] = np.maximum(probs[rows], heard)  # the likeliest reading
            gained[k] = h
    else:
        probs, rnn = np.zeros(0, dtype=np.float32), state.rnn
    return record_frames(state, inputs, left, probs, rnn, gained)


def vad_probs(state: VadState, start_ms: float, end_ms: float) -> tuple[int, np.ndarray]:
    """The probabilities still held for frames overlapping ``[start_ms, end_ms)``.

    Returns ``(first_frame, probs)``; frames not analysed yet or already dropped from the
    history are left out, so ``probs`` may be shorter than the range (or empty)."""
    f0 = max(int(np.floor(start_ms / FRAME_MS)), state.probs_start, 0)
    f1 = min(int(np.ceil(end_ms / FRAME_MS)), state.frames_done)
    if f1 <= f0:
        return f0, np.zeros(0, dtype=np.float32)
    return f0, state.probs[f0 - state.probs_start: f1 - state.probs_start]


def speech_fraction(state: VadState, start_ms: float, end_ms: float, threshold: float = 0.5,
                    pad_ms: float = 0.0) -> float | None:
    """Fraction of the frames in ``[start_ms - pad_ms, end_ms + pad_ms)`` whose probability
    reaches ``threshold``; None when no frame of the range is known."""
    _, p = vad_probs(state, start_ms - pad_ms, end_ms + pad_ms)
    if not len(p):
        return None
    return float(np.mean(p >= threshold))


def is_speech_padded(state: VadState, start_ms: float, end_ms: float, threshold: float = 0.5,
                     pad_before_ms: float = 300.0, pad_after_ms: float = 500.0) -> bool:
    """Whether ``[start_ms, end_ms)`` is speech or lies within padding of speech: True if any
    known frame of ``[start_ms - pad_after_ms, end_ms + pad_before_ms)`` reaches ``threshold``.

    For compute gating: audio up to ``pad_after_ms`` after speech (hangover: word tails,
    short pauses) and ``pad_before_ms`` before it (onsets) counts as speech. Conservative when
    it cannot know: a range none of whose frames is known (not analysed yet, or older than the
    history) is reported as speech."""
    _, p = vad_probs(state, start_ms - pad_after_ms, end_ms + pad_before_ms)
    if not len(p):
        return True
    return bool((p >= threshold).any())


# ---------------------------------------------------------------------------------------------
# Speech turns (OpenAI realtime ``server_vad`` semantics)


@dataclass(frozen=True)
class TurnConfig:
    """OpenAI ``turn_detection: {type: "server_vad", ...}`` parameters."""

    threshold: float = 0.5  # a frame is speech when its probability reaches this
    prefix_padding_ms: int = 300  # audio reported before the speech onset
    silence_duration_ms: int = 500  # silence that ends a turn
    # Hysteresis: once in speech, frames stay speech down to this probability (Silero's own
    # iterator uses threshold - 0.15). None: the threshold itself (plain OpenAI semantics).
    end_threshold: float | None = None
    # Speech needed before a turn starts (0: the first speech frame starts it, as OpenAI). With
    # e.g. 64, isolated one-frame blips in noise start no turn; the reported onset is unchanged
    # (the first speech frame), only the event comes later.
    min_speech_ms: int = 0


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int  # what OpenAI reports: the onset minus prefix padding, clamped at 0 and at the last stop
    speech_start_ms: int  # the raw onset: start of the first speech frame


@dataclass(frozen=True)
class SpeechStopped:
    audio_end_ms: int  # what OpenAI reports: the audio time the stop was decided (includes the silence)
    speech_end_ms: int  # the raw end: end of the last speech frame


TurnEvent = SpeechStarted | SpeechStopped


@dataclass
class TurnState:
    config: TurnConfig = field(default_factory=TurnConfig)
    frames_seen: int = 0  # probabilities consumed (frame index of the next one)
    in_speech: bool = False
    candidate_frames: int = 0  # speech frames in a row not yet enough to start a turn (min_speech_ms)
    speech_start_frame: int = -1  # first frame of the current (or candidate) turn
    last_speech_frame: int = -1  # last frame at or above the threshold in the current turn
    last_stop_ms: int = 0  # audio_end_ms of the last turn: the next one's padding starts no earlier


def push_turn(state: TurnState, probs: np.ndarray, silence_duration_ms: int | None = None) -> list[TurnEvent]:
    """Consume the next frame probabilities (in order, as :func:`push_vad` returns them) and
    return the turn events they cause, updating ``state``.

    ``silence_duration_ms`` overrides the config's for this call (e.g. from
    :func:`text_turn_silence_ms` applied to the text transcribed so far)."""
    cfg = state.config
    silence = cfg.silence_duration_ms if silence_duration_ms is None else silence_duration_ms
    silence_frames = max(1, -(-int(silence) // FRAME_MS))  # ceil
    stay = cfg.threshold if cfg.end_threshold is None else cfg.end_threshold
    need = max(1, -(-int(cfg.min_speech_ms) // FRAME_MS))
    events: list[TurnEvent] = []
    for p in np.asarray(probs, dtype=np.float32).reshape(-1):
        i = state.frames_seen
        state.frames_seen += 1
        if not state.in_speech:
            if p < cfg.threshold:
                state.candidate_frames = 0
                continue
            if state.candidate_frames == 0:
                state.speech_start_frame = i
            state.candidate_frames += 1
            state.last_speech_frame = i
            if state.candidate_frames >= need:
                state.in_speech = True
                state.candidate_frames = 0
                onset = state.speech_start_frame * FRAME_MS
                events.append(SpeechStarted(max(0, state.last_stop_ms, onset - cfg.prefix_padding_ms), onset))
            continue
        if p >= stay:
            state.last_speech_frame = i
        elif i - state.last_speech_frame >= silence_frames:
            events.append(SpeechStopped((i + 1) * FRAME_MS, (state.last_speech_frame + 1) * FRAME_MS))
            state.in_speech = False
            state.last_stop_ms = (i + 1) * FRAME_MS
    return events


def finish_turn(state: TurnState) -> list[TurnEvent]:
    """End of stream: close an open turn at the end of its last speech frame."""
    if not state.in_speech:
        return []
    state.in_speech = False
    end = (state.last_speech_frame + 1) * FRAME_MS
    return [SpeechStopped(max(end, state.frames_seen * FRAME_MS), end)]


# ---------------------------------------------------------------------------------------------
# End of turn from the text (semantic-VAD spirit)

# Words after which a speaker has rarely finished: conjunctions, articles and possessives, prepositions
# that do not end phrasal verbs, subject pronouns, fillers.
TRAILING_WORDS = frozenset("""
and or but nor because although though unless whereas if than
the a an my your our their its every
of to for from with into onto at by between during without
i we they he she
""".split())
FILLERS = frozenset("um uh er erm ah hmm mm".split())
SENTENCE_END = re.compile(r"""[.?!。？！]["'”’)\]]*$""")
_TRAILING_PUNCT = re.compile(r"""(\.\.\.|…|[;:\-–—])["'”’)\]]*$""")
_ABBREVIATION = re.compile(r"\b(mr|mrs|ms|dr|prof|st|vs|etc|e\.g|i\.e)\.$", re.IGNORECASE)


def text_turn_silence_ms(text: str, base_silence_ms: int = 500, end_probability: float = 1.0,
                         complete_factor: float = 0.7, incomplete_factor: float = 2.0,
                         confident: float = 0.95) -> int:
    """Silence that should end a turn whose transcript so far is ``text``.

    - the text ends a sentence (``.``, ``?``, ``!``, possibly before a closing quote or
      bracket; not an ellipsis nor an abbreviation such as "Dr.") and the recogniser gave that
      punctuation a probability ``end_probability`` of at least ``confident``:
      ``base * complete_factor`` (350 ms by default) — the speaker has likely finished;
    - it trails off (ends with an ellipsis or a dash, or its last word is a conjunction,
      article, possessive, preposition, subject pronoun or filler such as "and", "the", "to",
      "um"): ``base * incomplete_factor`` (1000 ms) — they are likely mid-thought;
    - otherwise (no text, a comma, a word without punctuation, a sentence end the recogniser
      was unsure of): ``base``.

    The thresholds are measured (``benchmarks/turns_stream.py``, docs/journal/2026-11.md, "Speech turns, end to end"):
    read speech pauses 250-600 ms inside sentences at places where the words so far could end
    one, and Whisper, hearing silence, writes a period there too, with a lower probability.
    A comma ends many a turn in conversation (and many a clip), so it does not delay.
    """
    t = text.strip()
    if not t:
        return int(base_silence_ms)
    words = re.findall(r"[\w']+", t.lower())
    last = words[-1] if words else ""
    if _TRAILING_PUNCT.search(t) or last in FILLERS:  # "So, um." has not finished either
        return int(round(base_silence_ms * incomplete_factor))
    if SENTENCE_END.search(t) and not _ABBREVIATION.search(t):
        if end_probability >= confident:
            return int(round(base_silence_ms * complete_factor))
        return int(base_silence_ms)
    if last in TRAILING_WORDS:
        return int(round(base_silence_ms * incomplete_factor))
    return int(base_silence_ms)
