"""The voice-activity side of a :class:`~susurrus.streaming.session.StreamSession`: the VAD
gate (a step, or a flush and idling once no speech was heard for ``idle_after_ms``) and, with
``turns``, speech turns (``SpeechStarted`` / ``SpeechStopped``, each turn flushed and closed by
a ``TurnEnded``; ``semantic_turns``: the silence that ends a turn set by its text, read with
:meth:`VoiceActivity._peek_end`). A base class of ``StreamSession``: its methods work on the
session's state and call its step (``_step``, ``_reanchor``, ``_decode``)."""

from __future__ import annotations

import time

import numpy as np
import torch

from susurrus.audio.features import SAMPLE_RATE
from susurrus.streaming.calls import Steps, drive
from susurrus.streaming.config import FRAME_S, lookahead_for
from susurrus.streaming.encoder import EncoderState, encode_step
from susurrus.streaming.events import Event, Interim, StepStats, TurnEnded
from susurrus.streaming.guards import speech_mask
from susurrus.streaming.state import WindowState
from susurrus.streaming.vad import FRAME_MS, SpeechStarted, SpeechStopped, push_turn, text_turn_silence_ms, vad_probs


class VoiceActivity:
    """The gate and turn methods of ``StreamSession`` (see the module's docstring)."""

    def _speech_after_commit(self, skip_s: float, threshold: float) -> float:
        """Seconds of speech in the window from ``skip_s`` after its last committed word (its
        start when nothing is committed) to the audio's edge: VAD frames at ``threshold``
        (without a VAD, frames above the noise floor)."""
        win = self.window
        start = (win.start_frame + 2 * win.committed_end_frame) / 100 if win.committed else win.start_frame / 100
        start += skip_s
        if self.vad is not None:
            _, p = vad_probs(self.vad_state, start * 1000, self.audio_time * 1000)
            return float((p >= threshold).sum()) * FRAME_MS / 1000
        first = max(0, round((start - win.start_frame / 100) / FRAME_S))
        return float(speech_mask(win.mel, win.mel.shape[1] // 2)[first:].sum()) * FRAME_S

    def _turn_events(self, probs: np.ndarray) -> list[Event]:
        cfg = self.config
        if len(probs):
            speech = np.flatnonzero(probs >= cfg.gate_threshold)
            if len(speech):
                first = self.vad_state.frames_done - len(probs)
                self.last_speech_ms = float((first + speech[-1] + 1) * FRAME_MS)
        if self.turn_state is None or not len(probs):
            return []
        if not cfg.semantic_turns:
            return self._turn_transitions(push_turn(self.turn_state, probs))
        events: list[Event] = []
        for p in probs:  # a frame at a time: the text is read at the frame a pause reaches ``probe``
            events.extend(self._turn_transitions(push_turn(self.turn_state, p[None], self._pause_silence_ms())))
        return events

    def _turn_transitions(self, turn_events: list) -> list[Event]:
        events: list[Event] = []
        for ev in turn_events:
            events.append(ev)
            if isinstance(ev, SpeechStarted):
                self.turn_start_ms = ev.audio_start_ms
                self.turn_first_word = len(self.words)
            else:
                events.extend(self._end_turn())
                events.append(self._close_turn(ev))
        return events

    def _end_turn(self) -> list[Event]:
        """A turn ended: commit everything decoded so far, as at the end of audio, but keep the
        window (its audio, encoder cache and committed text) for what follows. A turn is a
        boundary of the output, not a cold start: the next turn's first words are read with
        the left context the plain stream has (a window restarted here read JFK's "ask not"
        as "As not" and lost "what"). Long silence idles and re-anchors as in the plain
        stream."""
        win = self.window
        if win.encoder is None and not win.committed:
            return []
        return drive(self.net, self._step(final=True, turn_end=True))

    def _pause_silence_ms(self) -> int | None:
        """``semantic_turns``: the silence that ends the open turn at its current pause. Until
        the pause is a few frames long, the base silence; then, once per pause, the turn's text
        as if the audio ended here (:meth:`_peek_end`) sets it (:func:`text_turn_silence_ms`)."""
        ts = self.turn_state
        base = ts.config.silence_duration_ms
        if not ts.in_speech:
            return None
        quiet = ts.frames_seen - 1 - ts.last_speech_frame  # silent frames so far in this pause
        probe = max(1, min(6, text_turn_silence_ms(".", base) // FRAME_MS))  # 192 ms, or less if a
        if quiet < probe:  # finished sentence may end a turn sooner than that
            return base
        if self._pause[0] != ts.last_speech_frame:
            text, probability = self._peek_end()
            self._pause = (ts.last_speech_frame, text_turn_silence_ms(text, base, probability))
        return self._pause[1]

    @torch.inference_mode()
    def _peek_end(self) -> tuple[str, float]:
        """The open turn's text if the audio ended here, and the probability the decoder gave
        the punctuation after its last word (0 without any; :func:`text_turn_silence_ms` uses
        it only when that punctuation ends a sentence). Decodes the window as the final
        step would (everything encoded, the silence heard so far as the right context) without
        changing the session: the encoder state is a value, and the cross-attention positions
        written are put back."""
        t0, c0 = time.perf_counter(), time.thread_time()
        turn_text = "".join(w.word for w in self.words[self.turn_first_word:])
        self._sync_mel()
        win = self.window
        if self.language is None or win.mel.shape[1] < 2:  # not detected yet: the text so far
            return turn_text + self.interim, 0.0
        before = win.encoder or EncoderState.empty(self.net)
        lookahead = round(lookahead_for(self.config, self.language) / 1000 / FRAME_S)
        enc = encode_step(self.net, before, win.mel, lookahead, final=True, running_max=self.mel_state.running_max,
                          silence=self._silence_frames)
        if enc.frames == 0:
            return turn_text + self.interim, 0.0
        saved = self.cross.save(before.finalized, max(enc.frames + self._silence_frames, self.cross.real))
        prefix = win.prefix
        try:
            drive(self.net, self._update_cross(before, enc))
            tokens, _, probs, _, _, _ = drive(self.net, self._decode(enc.frames, final=True))
        finally:
            self.cross.load(saved)
            win.prefix = prefix
        k = len(tokens)  # the punctuation after the last token with a letter or digit (if any)
        while k > 0 and not any(c.isalnum() for c in self.tokenizer.decode([tokens[k - 1]])):
            k -= 1
        probability = probs[k] if k < len(tokens) else 0.0
        self.stats.append(StepStats(self.audio_time, time.perf_counter() - t0, time.thread_time() - c0,
                                    enc.frames - before.finalized, len(tokens)))
        return turn_text + self.tokenizer.decode(tokens), probability

    def _close_turn(self, stopped: SpeechStopped) -> TurnEnded:
        words = self.words[self.turn_first_word:]
        self.turn_first_word = len(self.words)
        return TurnEnded("".join(w.word for w in words).strip(), list(words), self.turn_start_ms,
                         stopped.audio_end_ms)

    def _advance(self) -> Steps[list[Event]]:
        """A step boundary: decode, or (no speech for ``idle_after_ms``) flush and idle."""
        cfg = self.config
        if not cfg.vad:
            return (yield from self._step(final=False))
        now_ms = self.samples_fed * 1000 / SAMPLE_RATE
        quiet = (self.last_speech_ms is None or now_ms - self.last_speech_ms >= cfg.idle_after_ms
                 or (self.idle and self.last_speech_ms <= self.idle_since_ms))
        if not quiet:
            self.idle = False
            return (yield from self._step(final=False))
        events = [] if self.idle else (yield from self._flush())
        self._trim_idle_window()
        return events

    def _flush(self) -> Steps[list[Event]]:
        """Commit everything decoded in the window and start an empty one here (the audio
        after it is non-speech, or a turn ended)."""
        win = self.window
        if win.encoder is None and not win.committed:
            return []
        events = yield from self._step(final=True)
        self._reanchor(at_end=True)
        if self.detect:
            self.language = None  # the next speech may be in another language
        if self.config.vad:  # nothing more to compute until speech resumes
            self.idle = True
            self.idle_since_ms = self.samples_fed * 1000 / SAMPLE_RATE
        self.interim = ""
        events.append(Interim("", self.audio_time))
        return events

    def _trim_idle_window(self) -> None:
        """While idle, keep only the last ``resume_pad_ms`` of mel frames (the next window's
        left context when speech resumes)."""
        self._sync_mel()
        win = self.window
        keep = max(2, round(self.config.resume_pad_ms / 10)) // 2 * 2  # even: encoder frames are 2 mel frames
        if win.encoder is None and not win.committed and win.mel.shape[1] > keep:
            cut = win.mel.shape[1] - keep
            a, b = win.start_frame / 100, (win.start_frame + cut) / 100
            if self.skipped and abs(self.skipped[-1][1] - a) < 1e-6:
                a = self.skipped.pop()[0]
            self.skipped.append((a, b))
            self.window = WindowState(start_frame=win.start_frame + cut, mel=win.mel[:, cut:].clone())
