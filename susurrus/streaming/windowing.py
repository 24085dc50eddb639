"""The window side of a :class:`~susurrus.streaming.session.StreamSession`: the decoder's prompt
and one step's decode over the window's cross-attention, its tokens' text, a decode again when a
window is overdue (``overdue.py``) or its last decode stopped early, the language of a window,
and re-anchoring (a new window after the last committed word). A base class of
``StreamSession``: its methods work on the session's state and call its step (``_step``)."""

from __future__ import annotations

import torch

from susurrus.decoding.decode import DecodingOptions, LogitRules
from susurrus.streaming.calls import CrossKV, Steps
from susurrus.streaming.config import FRAME_S
from susurrus.streaming.encoder import EncoderState
from susurrus.streaming.events import Committed, Event, LanguageDetected
from susurrus.streaming.greedy import StepDecode, decode_step
from susurrus.streaming.guards import reads_again
from susurrus.streaming.language import window_language
from susurrus.streaming.overdue import MIN_SPEECH_S, RETRY_S, overdue_s, read_again
from susurrus.streaming.state import WindowState
from susurrus.streaming.words import starts_word


class WindowDecoding:
    """The prompt, decode, overdue, language and re-anchoring methods of ``StreamSession`` (see
    the module's docstring)."""

    def _overdue(self, n_real: int) -> bool:
        """Whether the window has gone :func:`overdue_s` of audio past its last committed word
        (its start), with at least ``MIN_SPEECH_S`` of speech in it (:mod:`overdue`)."""
        cfg, win = self.config, self.window
        return ((n_real - win.committed_end_frame) * FRAME_S >= overdue_s(cfg)
                and self._speech_after_commit(0.0, cfg.gate_threshold) >= MIN_SPEECH_S)

    def _read_again(self, n_real: int) -> Steps[StepDecode | None]:
        """The window read again in both directions (:func:`overdue.read_again`), at most once
        per ``RETRY_S`` of audio, else None."""
        win = self.window
        if win.read_again_at is not None and n_real - win.read_again_at < round(RETRY_S / FRAME_S):
            return None
        win.read_again_at = n_real
        return (yield from read_again(self.net, self.tokenizer, self.config, win, self.cross, self._prompt(),
                                      self._rules, self._starts_word, n_real, self.mel_state.running_max,
                                      self._silence_frames))

    def _drop_prompt(self) -> None:
        """Decode the window from here on without the text so far as its prompt."""
        self.previous = []
        self.window.prefix, self.window.last_hypothesis, self._rules = None, [], None

    def _retry_end(self) -> Steps[list[Event]]:
        """A window's last decode stopped while speech remains after its last committed word
        (the text so far led the decoder to end-of-text, or to read it again): decode that audio
        once more as a window of its own after the committed words, the text so far as its
        prompt, or without a prompt when nothing was committed in the window."""
        win = self.window
        if win.committed:
            self._reanchor()
        elif self.previous:
            self._drop_prompt()
        else:
            return []
        self._retrying = True
        n_words = len(self.words)
        try:
            events = yield from self._step(final=True)
        finally:
            self._retrying = False
        new = self.words[n_words:]
        if new and reads_again([w.word for w in self.words[max(0, n_words - 8):n_words]], [w.word for w in new]):
            # it read the committed words again (their end time was early): not new speech
            self.words = self.words[:n_words]
            self.dropped.extend(new)
            events = [e for e in events if not isinstance(e, Committed)]
        return events

    def _detect_language(self, sure_only: bool = False) -> LanguageDetected | None:
        """Pick the window's language (:func:`~susurrus.streaming.language.window_language`)."""
        found = window_language(self.net, self._base_tokenizer, self.cross.kv, self.window.mel,
                                self.mel_state.running_max, sure_only)
        if found is None:
            return None
        self.language, probability = found
        self.tokenizer = self._base_tokenizer.with_options(self.language, self.config.task)
        self.window.prefix = None
        self._rules = None
        return LanguageDetected(self.language, round(probability, 4), self.audio_time)

    def _update_cross(self, before: EncoderState, enc: EncoderState) -> Steps[None]:
        start = before.finalized
        parts = [enc.new_final, enc.provisional_out]  # frames from before.finalized on
        if enc.silence_out is not None:
            parts.append(enc.silence_out)
        fresh = torch.cat(parts, dim=1)
        self.cross.write(start, (yield CrossKV(fresh)))

    def _prompt(self) -> list[int]:
        tok = self.tokenizer
        given = self._given_prompt
        room = max(0, self.config.context_tokens - len(given))
        context = given + (self.previous[-room:] if room and self.previous else [])
        prompt = [tok.sot_prev, *context] if context else []
        return prompt + tok.sot_sequence + [tok.no_timestamps]

    def _decode(self, n_real: int, final: bool, relaxed: bool = False) -> Steps[tuple]:
        """This step's decode (:func:`~susurrus.streaming.greedy.decode_step`) with the session's
        prompt and logit rules, as a tuple of :class:`~susurrus.streaming.greedy.StepDecode`'s
        fields but ``looped`` (which sets ``_decode_looped``)."""
        prompt = self._prompt()
        if self._rules is None or self._rules.sample_begin != len(prompt):
            self._rules = LogitRules(self.tokenizer, DecodingOptions(without_timestamps=True), len(prompt),
                                     self.net.dims.n_vocab)
        out = yield from decode_step(self.net, self.tokenizer, self.config, self.window, self.cross.kv, prompt,
                                     self._rules, self._starts_word, n_real, final, relaxed)
        self._decode_looped = out.looped
        return out.tokens, out.frames, out.probs, out.qk, out.cache, out.following

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode([token])
        return piece

    def _starts_word(self, token: int) -> bool:
        return starts_word(self._piece(token), self.language)

    def _committed_tail(self, context_s: float) -> tuple[int, int] | None:
        """Where the window's committed words of its last ``context_s`` before the committed end
        start: (index in ``window.committed``, window encoder frame); None when the words and
        tokens do not line up (then nothing is carried)."""
        win = self.window
        offset = win.start_frame / 100.0
        end = offset + win.committed_end_frame * FRAME_S
        text = ""
        found = None
        for word in reversed(self.words):
            if word.start < max(offset, end - context_s) or word.end > end + FRAME_S:
                break
            text = word.word + text
            for j in range(len(win.committed) - 1, -1, -1):
                piece = self.tokenizer.decode(win.committed[j:])
                if piece == text:
                    found = j, int((word.start - offset) / FRAME_S)
                    break
                if len(piece) > len(text):
                    break
        return found if found is not None and found[1] > 0 else None

    def _reanchor(self, at_end: bool = False, context_s: float = 0.0) -> None:
        """Start a new window at the end of the last committed word (or drop old audio when
        nothing was committed), re-encoding only the tail. ``at_end``: everything is
        committed; keep only ``resume_pad_ms`` of audio as the next window's left context.
        ``context_s``: the new window starts with the committed words of the last ``context_s``
        before the committed end, audio and tokens (forced, not said again), so that the speech
        after them is encoded and read with left context, as within a window (a full window
        rolling over in the middle of speech)."""
        win = self.window
        n_enc = win.mel.shape[1] // 2
        cut = win.committed_end_frame
        carried: list[int] = []
        if at_end:
            cut = max(0, n_enc - round(self.config.resume_pad_ms / 1000 / FRAME_S))
        elif cut <= 0 or cut > n_enc:
            cut = max(1, n_enc - round(5.0 / FRAME_S))
        elif context_s > 0 and (tail := self._committed_tail(context_s)) is not None:
            j, cut = tail
            carried = win.committed[j:]
        cut_mel = 2 * cut
        self.previous.extend(win.committed[:len(win.committed) - len(carried)])
        self.previous = self.previous[-self.config.context_tokens * 2:]
        if self._reset_prompt:  # after a loop or a stall
            self.previous, self._reset_prompt = [], False
        self.window = WindowState(start_frame=win.start_frame + cut_mel, mel=win.mel[:, cut_mel:].clone(),
                                  committed=list(carried),
                                  committed_end_frame=win.committed_end_frame - cut if carried else 0)
        self.cross.restore(0)
