"""A live transcription stream: audio in, interim text and committed words out.

One :class:`StreamSession` per stream. Each ``feed`` appends audio; every ``chunk_ms`` of
new audio a *step* runs:

1. new mel frames are computed (``frontend``) and the new encoder frames encoded against the
   running key/value cache (``encoder``); nothing already final is encoded again;
2. the decoder cross-attends to the real frames followed by the encoder output of silence up
   to 30 s (Whisper's end-of-audio context), projected once per model and kept in a buffer
   that real frames overwrite;
3. the committed tokens are forced as a prefix and the continuation is decoded greedily
   (``greedy``, with the end-of-text and loop guards of ``guards``): the interim hypothesis;
4. the commit policy (``commit``) decides which of its tokens are final. AlignAtt (default): a
   token is stable while the alignment heads attend at least ``commit_margin_ms`` before the
   audio edge; complete words among the stable tokens are committed, timed by ``words``.
   A window that has committed nothing for too long commits what it has read (``overdue``).
   Committed text never changes.

Voice activity (Silero VAD, ``vad``; the gate and turns: ``activity``) gates the compute: once no speech was heard for
``idle_after_ms`` the window is flushed (everything decoded is committed) and nothing is encoded
or decoded until speech returns; the next window starts ``resume_pad_ms`` before it, with the
committed text as its prompt. Committed words over audio the VAD calls non-speech, or known
Whisper hallucinations over weak speech, are dropped (``hallucination.py``). With ``turns``
(OpenAI ``server_vad`` semantics) the stream also reports speech starts and stops and closes a
turn at each stop: the window is flushed and a :class:`TurnEnded` event carries its text.

When the window approaches 30 s it is re-anchored at the end of the last committed word: the
tail is re-encoded from position 0 and the committed text becomes the decoder's prompt, so
memory and per-step cost stay flat however long the stream runs.

Every decision (steps, flushes, idling, re-anchoring, turn events and the peek, language
detection) is a function of the audio fed so far, never of how it was cut into ``feed`` calls:
``feed`` cuts the audio at step boundaries (with turns, at VAD frame ends too) and the mel
frames are computed when a decision reads them, so the same audio gives the same words, times
and events in pieces of any size (``tests/test_streaming_piece_sizes.py``).

The window's prompt, decode and re-anchoring are in ``windowing.py``, the gate and turns in
``activity.py`` (the session's two base classes). Everything that changes is one
:class:`~susurrus.streaming.state.StreamState` (``state.py``);
the settings and events are in ``config.py`` and ``events.py`` (and importable from here).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np
import torch

from susurrus.audio.features import SAMPLE_RATE
from susurrus.model.caches import KV
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper
from susurrus.streaming.activity import VoiceActivity
from susurrus.streaming.calls import Steps, drive
from susurrus.streaming.commit import capitalised, common_prefix, has_letters, stable_count, word_boundary
from susurrus.streaming.config import (
    DETECT_EARLIEST_S,
    DETECT_SURE,
    FRAME_S,
    LOST_SPEECH_S,
    LOST_STEPS,
    PRESETS,
    RETRY_SPEECH_S,
    SENTENCE_END,
    SILENCE_LEVEL,
    UNSPACED_LANGUAGES,
    StreamConfig,
    lookahead_for,
    stream_config,
)
from susurrus.streaming.encoder import EncoderState, encode_steps, encode_window
from susurrus.streaming.events import Committed, Event, Interim, LanguageDetected, StepStats, StreamWord, TurnEnded
from susurrus.streaming.frontend import push_audio, stream_samples
from susurrus.streaming.guards import LOOP_WORDS, loop_span, reads_past_audio, repeated_tail, word_key
from susurrus.streaming.hallucination import heard, opening_hallucinated
from susurrus.streaming.opening import find_opening
from susurrus.streaming.overdue import overdue_count
from susurrus.streaming.repeats import committed_reads, said_again
from susurrus.streaming.state import CrossBuffer, StreamState, WindowState, silence_cross_kv, state_attribute
from susurrus.streaming.vad import FRAME_SAMPLES, SileroVad, finish_turn, load_vad, push_vad_steps
from susurrus.streaming.windowing import WindowDecoding
from susurrus.streaming.words import end_frame, read_span, step_words

__all__ = [  # what other modules import from here (the settings and events live in config.py, events.py)
    "DETECT_EARLIEST_S", "DETECT_SURE", "FRAME_S", "PRESETS", "RETRY_SPEECH_S", "SENTENCE_END", "SILENCE_LEVEL",
    "UNSPACED_LANGUAGES", "Committed", "CrossBuffer", "Event", "Interim", "LanguageDetected", "StepStats",
    "StreamConfig", "StreamSession", "StreamWord", "TurnEnded", "WindowState", "silence_cross_kv", "stream_config",
    "word_key",
]


class StreamSession(WindowDecoding, VoiceActivity):
    """Incremental transcription of one audio stream. Not thread-safe; one per stream.

    What is shared and never changes is kept here (the model, settings, VAD network, silence);
    everything that changes is ``self.state`` (:class:`~susurrus.streaming.state.StreamState`),
    read and written through the attributes below."""

    # where each attribute lives in the state (state.py): feed counters, ...
    samples_fed = state_attribute("feed.samples_fed")
    samples_at_last_step = state_attribute("feed.samples_at_last_step")
    finished, _unheard = state_attribute("feed.finished"), state_attribute("feed.unheard")
    # ... the sub-states of the front end, window, cross-attention buffer, VAD and turn detector, ...
    mel_state, window, cross = state_attribute("mel"), state_attribute("window"), state_attribute("cross")
    vad_state, turn_state = state_attribute("vad"), state_attribute("turn")
    # ... the VAD gate, ...
    last_speech_ms, idle = state_attribute("gate.last_speech_ms"), state_attribute("gate.idle")
    idle_since_ms, skipped = state_attribute("gate.idle_since_ms"), state_attribute("gate.skipped")
    # ... the open turn's output, ...
    turn_start_ms, turn_first_word = state_attribute("open_turn.start_ms"), state_attribute("open_turn.first_word")
    _pause, _open_punctuation = state_attribute("open_turn.pause"), state_attribute("open_turn.open_punctuation")
    # ... the language, ...
    language, tokenizer = state_attribute("language.code"), state_attribute("language.tokenizer")
    # ... the decoder's prompt and its loop/stall flags, ...
    previous, _rules = state_attribute("decoder.previous"), state_attribute("decoder.rules")
    _pieces = state_attribute("decoder.pieces")
    _reset_prompt, _looping = state_attribute("decoder.reset_prompt"), state_attribute("decoder.looping")
    _retrying, _decode_looped = state_attribute("decoder.retrying"), state_attribute("decoder.decode_looped")
    # ... and the output
    words, dropped = state_attribute("output.words"), state_attribute("output.dropped")
    interim, stats = state_attribute("output.interim"), state_attribute("output.stats")

    def __init__(self, net: Whisper, tokenizer: Tokenizer, config: StreamConfig = StreamConfig(),  # noqa: B008 (frozen)
                 silence: list[KV] | None = None, vad: SileroVad | None = None):
        """``silence``: :func:`silence_cross_kv` of ``net``; ``vad``: a loaded Silero VAD. Both
        are shared between sessions (``WhisperModel.stream`` does); computed or loaded here
        when not given."""
        self.net = net
        self.config = config
        self._base_tokenizer = tokenizer
        # multilingual without a language: detected at each window's start (so a stream can
        # switch language between turns or pauses); until then nothing is decoded
        self.detect = net.is_multilingual and config.language is None
        self._silence = silence if silence is not None else silence_cross_kv(net)
        self.vad = (vad or load_vad()) if config.vad or config.turns else None
        self._silence_frames = round(config.silence_context_ms / 1000 / FRAME_S)
        # the user's prompt: at most half the context (Whisper keeps the last 224 tokens offline)
        self._given_prompt = (tokenizer.encode(" " + config.prompt.strip())[-(config.context_tokens // 2):]
                              if config.prompt and config.prompt.strip() and config.context_tokens else [])
        self.reset()

    def reset(self) -> None:
        """Forget the stream: the state of one that has heard nothing (the model, settings, VAD
        and silence stay)."""
        language = None if self.detect else (self.config.language if self.net.is_multilingual else "en")
        self.state = StreamState.fresh(self.net.dims.n_mels, self._silence,
                                       self._base_tokenizer.with_options(language or "en", self.config.task),
                                       language, self.config.turns, idle=self.config.vad)
        self.state.feed.samples_at_last_step = -self.config.phase_samples  # the first step ends phase early

    # ------------------------------------------------------------------ public API

    @property
    def audio_time(self) -> float:
        return self.samples_fed / SAMPLE_RATE

    @property
    def text(self) -> str:
        return "".join(w.word for w in self.words)

    @property
    def steps(self) -> int:
        """Steps run so far (each encoded and decoded new audio; an idle stream runs none)."""
        return len(self.stats)

    def feed(self, pcm: np.ndarray) -> list[Event]:
        """Append 16 kHz mono audio (float32 in [-1, 1] or int16); returns new events."""
        return drive(self.net, self.feed_steps(pcm))

    def step_due(self, samples: int) -> bool:
        """Whether ``samples`` more audio would reach this stream's next step boundary (a
        scheduler may hold such a feed so that several streams' steps share a round)."""
        return self.samples_fed + samples - self.samples_at_last_step >= self.config.step_samples

    def feed_steps(self, pcm: np.ndarray) -> Steps[list[Event]]:
        """:meth:`feed` as a generator of its model calls (:mod:`~susurrus.streaming.calls`),
        for running many streams together (:class:`~susurrus.streaming.batch.StreamBatch`).
        The audio is checked here, before anything is accepted."""
        if self.finished:
            raise RuntimeError("stream already finished")
        return self._feed_steps(stream_samples(pcm))

    def _feed_steps(self, samples: np.ndarray) -> Steps[list[Event]]:
        step = self.config.step_samples
        # with turns, a VAD frame can end a turn and flush the window: cut at VAD frame ends too
        frame = FRAME_SAMPLES if self.turn_state is not None else step
        events: list[Event] = []
        while len(samples):
            # cut at step boundaries (and VAD frame ends), so that every decision sees exactly
            # the audio up to its own time, whatever pieces the audio came in
            take = min(len(samples), self.samples_at_last_step + step - self.samples_fed,
                       frame - self.samples_fed % frame)
            events.extend((yield from self._push(samples[:take])))
            samples = samples[take:]
            if self.samples_fed - self.samples_at_last_step >= step:
                self.samples_at_last_step += step
                events.extend((yield from self._advance()))
        return events

    def finish(self) -> list[Event]:
        """End of audio: decode and commit everything left."""
        return drive(self.net, self.finish_steps())

    def finish_steps(self) -> Steps[list[Event]]:
        """:meth:`finish` as a generator of its model calls (see :meth:`feed_steps`)."""
        return self._finish_steps()

    def _finish_steps(self) -> Steps[list[Event]]:
        if self.finished:
            return []
        self._sync_mel()
        frames = push_audio(self.mel_state, np.zeros(0, np.float32), final=True)
        self.window.append_mel(frames)
        events: list[Event] = []
        if self.vad is not None:
            probs = yield from push_vad_steps(self.vad, self.vad_state, np.zeros(0, np.float32), final=True)
            events.extend(self._turn_events(probs))
        if not self.idle:
            events.extend((yield from self._step(final=True)))
        if self.turn_state is not None:
            for ev in finish_turn(self.turn_state):
                events.append(ev)
                events.append(self._close_turn(ev))
        self.finished = True
        return events

    def events(self, blocks: Iterable[np.ndarray]) -> Iterator[Event]:
        """Feed every block of ``blocks`` and finish when they run out, yielding each event as it
        comes, the last words included: ``for event in model.stream().events(mic_blocks()):``.
        (Leaving the loop early leaves the stream open: ``finish()`` returns the rest.)"""
        for pcm in blocks:
            yield from self.feed(pcm)
        yield from self.finish()

    def flush(self) -> list[Event]:
        """Commit everything decoded so far as if the audio ended here, and go on: the next
        audio opens a new window with the committed text as its prompt (a client's "end of
        utterance"). The stream stays open; nothing already fed is dropped."""
        if self.finished:
            raise RuntimeError("stream already finished")
        return drive(self.net, self._flush())

    # ------------------------------------------------------------------ voice activity

    def _push(self, samples: np.ndarray) -> Steps[list[Event]]:
        """Audio into the VAD (its frames a model call, run with other streams' in a batch) and
        the mel front end's queue; turn events it causes."""
        self.samples_fed += len(samples)
        self._unheard.append(np.array(samples, dtype=np.float32))  # a copy: the caller may reuse its buffer
        if self.vad is None:
            return []
        return self._turn_events((yield from push_vad_steps(self.vad, self.vad_state, samples)))

    def _sync_mel(self) -> None:
        """The mel frames of all the audio fed, into the window. Called by what reads them (a
        step, an idle trim, the peek) and only then, so that the frames computed together (and
        with them the float rounding of a batched front end) are set by the audio times of
        those decisions, never by the pieces the audio came in."""
        if self._unheard:
            samples = np.concatenate(self._unheard) if len(self._unheard) > 1 else self._unheard[0]
            self._unheard = []
            frames = push_audio(self.mel_state, samples)
            self.window.append_mel(frames)

    # ------------------------------------------------------------------ one step

    @torch.inference_mode()
    def _step(self, final: bool, turn_end: bool = False) -> Steps[list[Event]]:
        """Encode what is new, decode, commit. ``final``: the audio of this window ends here
        (end of stream, or a flush: non-speech or a turn's end follows), commit it all;
        ``turn_end``: but the window goes on, so the decoder goes on without the punctuation
        after the last word ("ask not" may go on "what your country"); said again, it is not
        output twice."""
        t0, c0 = time.perf_counter(), time.thread_time()
        self._sync_mel()
        cfg = self.config
        win = self.window
        max_frames = int(cfg.max_window_s / FRAME_S)
        stalled = (win.committed and win.encoder is not None
                   and ((win.encoder.frames - win.committed_end_frame) * FRAME_S > cfg.stall_s
                        or win.lost_steps >= LOST_STEPS))
        if not final and (win.mel.shape[1] // 2 > max_frames or stalled or self._looping):
            # full window, or nothing committed for a while after committed text the decoder
            # keeps failing to continue, or a decoding loop: start afresh at the end of the last
            # committed word (after a stall or a loop without the prompt: the text so far is
            # what leads the decoder to repeat itself)
            rolling = not (stalled or self._looping)  # a full window in the middle of speech
            self._reset_prompt |= bool(stalled) or self._looping
            self._looping = False
            self._reanchor(context_s=cfg.roll_context_s if rolling else 0.0)
            win = self.window
        elif (not final and not win.committed and self.previous and win.encoder is not None
              and (win.encoder.frames * FRAME_S > cfg.stall_s or win.lost_steps >= LOST_STEPS)):
            # a window that commits nothing for a while: decode it again without the prompt
            self._drop_prompt()
        before = win.encoder or EncoderState.empty(self.net)
        lookahead = max(0, round(lookahead_for(cfg, self.language) / 1000 / FRAME_S))
        enc = yield from encode_steps(self.net, before, win.mel, lookahead, final=final,
                                      running_max=self.mel_state.running_max, silence=self._silence_frames)
        encoded = enc.frames - before.finalized
        win.encoder = enc
        n_real = enc.frames
        if n_real == 0:
            return []
        yield from self._update_cross(before, enc)
        if final and cfg.task != "transcribe":
            # a translation reorders the audio: its window's last decode reads the window as
            # offline Whisper encodes it, with the silence padding to 30 s, every frame attending
            # to every other (once per window)
            self.cross.write(0, self.net.decoder.cross_kv(
                encode_window(self.net, win.mel, self.mel_state.running_max)))
        events: list[Event] = []
        if self.language is None:
            if n_real * FRAME_S * 1000 < self.config.detect_ms and not final:
                # before detect_ms: decided as soon as the decoder is sure of it (one token over
                # the stream's own encoding); an unsure language waits for detect_ms
                sure = n_real * FRAME_S >= DETECT_EARLIEST_S and self._detect_language(sure_only=True)
                if not sure:
                    return []
                events.append(sure)
            else:
                events.append(self._detect_language())
        # a decoder that committed nothing for a while may be stuck on a token whose attention
        # glitches past the audio edge: then decode past one such token and let it through
        relaxed = (enc.frames - win.committed_end_frame) * FRAME_S > cfg.commit_margin_ms / 1000 + 2.0
        tokens, frames, probs, qk, cache, following = yield from self._decode(n_real, final, relaxed)
        if self._decode_looped and (self.previous or win.committed):
            self._looping = not final  # re-anchored without the prompt at the next step
            self._reset_prompt |= final
        if final:
            n_commit = len(tokens)
        elif not win.committed and win.mel.shape[1] * 10 < cfg.first_commit_ms:
            # a window's opening words need right context (Whisper guesses them otherwise):
            # at the stream start and after each re-anchoring
            n_commit = 0
        else:
            n_commit = stable_count(tokens, frames, probs, n_real, cfg, not win.committed, win.last_hypothesis,
                                    self.tokenizer.decode, relaxed)
        n_commit = word_boundary(tokens, n_commit, final, self._starts_word, self.tokenizer.eot, following)
        again = None
        if not n_commit and not final and cfg.task == "transcribe" and self._overdue(n_real):
            # committed nothing for too long: the words read before the margin that the last step
            # also decoded go, however unsure; none: the window read again as offline reads it (overdue.py)
            eot = self.tokenizer.eot
            n_commit = overdue_count(tokens, frames, n_real, cfg, self._starts_word, self._piece,
                                     win.committed_end_frame, common_prefix(tokens, win.last_hypothesis),
                                     following == eot)
            again = None if n_commit else (yield from self._read_again(n_real))
            n_again = 0
            if again is not None:  # its words another reading decoded too (this step, the last, the last read again)
                agreed = max(common_prefix(again.tokens, tokens), common_prefix(again.tokens, win.last_hypothesis),
                             common_prefix(again.tokens, win.last_reading))
                n_again = overdue_count(again.tokens, again.frames, n_real, cfg, self._starts_word, self._piece,
                                        win.committed_end_frame, agreed, again.following == eot)
                if not n_again:
                    win.last_reading = again.tokens  # (the next step's reading may agree with it)
            if n_again:  # (a reading that commits nothing leaves the step's own decode as it was)
                tokens, frames, probs, qk, cache, following = (again.tokens, again.frames, again.probs, again.qk,
                                                               again.cache, again.following)
                n_commit = n_again
            else:
                again = None
        if n_commit:
            win.last_reading = []  # (it read on from words committed since; a reading that commits is the hypothesis)
        guard_vad = self.vad_state if self.vad is not None else None
        found = None  # the window's opening words the stream lost (opening.py), committed in front
        if not win.committed and tokens:
            if win.first_read_ms is None:
                win.first_read_ms = win.mel.shape[1] * 10
            # its opening moved, or it was first read with right context enough to commit at once (as
            # when a language is detected after seconds): no earlier reading could show it moving
            # or the window is committed whole at its final decode (a client's item, a turn, the
            # stream's end): the last reading of its opening
            check = bool(win.first_tokens - {tokens[0]}) or win.first_read_ms >= cfg.first_commit_ms or final
            win.first_tokens.add(tokens[0])
        else:
            check = False
        if n_commit and check and again is None and cfg.opening_check and cfg.task == "transcribe":
            found = yield from find_opening(self.net, self.tokenizer, cfg, win, self.cross, self._prompt(), self._rules,
                                            self._starts_word, tokens, probs, qk, n_commit, n_real,
                                            self.mel_state.running_max, self._silence_frames, final, guard_vad)
            if found is not None:
                tokens, frames, probs, qk, n_commit = found.prepend(tokens, frames, probs, qk, n_commit)
        if n_commit:
            words, ends = step_words(self.tokenizer, tokens, n_commit, probs, qk, n_real, win,
                                     self.words[-1].end if self.words else None, round(self.audio_time, 3))
            if words:
                win.committed_end_frame = end_frame(words[-1], win)
            reads = [read_span(frames[a:b], n_real, win) for a, b in zip([0, *ends], ends)]  # where each was read
            recent = self.words[-3 * LOOP_WORDS:]
            # a repeat is kept where the audio holds it (repeats.py; asked only of a phrase said a third time)
            said = lambda a, b: said_again(committed_reads(recent, reads), a, b, guard_vad,  # noqa: E731
                                           cfg.gate_threshold)
            if final and words:  # the window's last words: one read in the silence after speech is invented,
                # and a phrase of 3+ words said again at once, not over audio of its own, is the decoder
                # reading its audio twice
                n_heard = (heard(words, guard_vad, cfg.gate_threshold, reads, self.words[-1].end if self.words else 0.0)
                           if cfg.hallucination_guard and guard_vad is not None else len(words))
                tail = len(recent) - min(8, len(recent))  # (the last 8 committed words and these)
                keep = min(n_heard, len(words) - repeated_tail(
                    [w.word for w in recent[tail:] + words], len(words),
                    heard=lambda a, b: said([i + tail for i in a], [i + tail for i in b])))
                if keep < len(words):
                    self.dropped.extend(words[keep:])
                    n_commit = ends[keep - 1] if keep else 0
                    words = words[:keep]
            alone = not win.committed  # the window's first words: where invented phrases appear
            span = loop_span([w.word for w in recent], [w.word for w in words], heard=said) if words else None
            if span is not None:  # a phrase a third time in a row the audio does not hold (a loop): that saying
                # goes, the words before it stand, the window restarts after it without the prompt
                win.committed_end_frame = end_frame(words[span[1] - 1], win)
                self.dropped.extend(words[span[0]:span[1]])  # those after it are read again
                if span[0]:
                    n_commit, words = ends[span[0] - 1], words[:span[0]]
                    tokens, self._looping, span = tokens[:n_commit], not final, None
                    self._reset_prompt |= final
            looped = span is not None
            if words and (looped or (cfg.hallucination_guard and alone
                                     and opening_hallucinated(words, guard_vad, cfg.gate_threshold,
                                                              read_span(frames[:n_commit], n_real, win)))):
                # refused: not kept as a decoder prefix either (it would steer the rest of the
                # window); the window restarts after the refused words, where they were read
                if not looped:
                    self.dropped.extend(words)
                self._reset_prompt |= looped
                if not final:
                    self._reanchor()
                    self.interim = ""
                    self.stats.append(StepStats(self.audio_time, time.perf_counter() - t0,
                                                time.thread_time() - c0, encoded, len(tokens)))
                    return events + [Interim("", self.audio_time)]
                n_commit = len(tokens)
            else:
                win.committed.extend(tokens[:n_commit])
                if self._open_punctuation:  # the decoder said the turn's closing punctuation again
                    while words and not has_letters(words[0].word):
                        words = words[1:]
                if words:
                    if self._open_punctuation.rstrip().endswith(SENTENCE_END):
                        # the output's sentence ended there; the decoder, without the full stop,
                        # may go on in lower case ("Americans." then "ask not")
                        words[0] = replace(words[0], word=capitalised(words[0].word))
                    self._open_punctuation = ""
                    self.words.extend(words)
                    events.append(Committed(words))
                if turn_end:  # the output keeps it; the decoder's context does not
                    while win.committed and not has_letters(self.tokenizer.decode(win.committed[-1:])):
                        self._open_punctuation = self.tokenizer.decode([win.committed.pop()]) + self._open_punctuation
        # the prefix cache now covers prompt + committed tokens but the last
        win.prefix = (cache.rewind(len(self._prompt()) + len(win.committed) - 1, keep=True)
                      if found is None and again is None else None)
        win.last_hypothesis = tokens[n_commit:]
        # the decoder lost its place: the continuation reads the silence past the audio, or the
        # decoder ends it without a word, while speech it has not read remains after the
        # committed text (neither reads any of that speech; re-anchored without the
        # prompt after LOST_STEPS such steps, as after a stall, but seconds sooner; a
        # translation is not aligned with its audio, see commit.py). A window already overdue
        # (overdue.py: seconds of speech since its last commit, and this step's overdue commit
        # found nothing) has shown the stall once that the second lost step would show again a
        # step later, past the stall bar: it is re-anchored at the next step
        lost = (not final and cfg.task == "transcribe" and (win.committed or self.previous)
                and reads_past_audio([self._piece(t) for t in tokens[n_commit:]], frames[n_commit:], n_real,
                                     ended=following == self.tokenizer.eot)
                and self._speech_after_commit(0.0, cfg.gate_threshold) >= LOST_SPEECH_S)
        if lost and not n_commit and self._overdue(n_real):
            win.lost_steps = LOST_STEPS
        else:
            win.lost_steps = win.lost_steps + 1 if lost else 0
        self.interim = self.tokenizer.decode(tokens[n_commit:])
        if not final:
            events.append(Interim(self.interim, self.audio_time))
        self.stats.append(StepStats(self.audio_time, time.perf_counter() - t0, time.thread_time() - c0, encoded,
                                    len(tokens)))
        # (speech at vad_threshold: the retry must not read a pause's possible speech, where Whisper invents)
        left = self._speech_after_commit(RETRY_SPEECH_S, cfg.vad_threshold) if final and not self._retrying else 0.0
        if left >= RETRY_SPEECH_S:  # from RETRY_SPEECH_S after the last word: its end can be early by that much
            events.extend((yield from self._retry_end()))
        return events
