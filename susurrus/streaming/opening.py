"""A window's opening words that the causal encoder lost, found again.

Whisper was trained on 30 s windows that often begin mid-utterance, and it learned to start its
transcript at the first word it is sure of. A stream's window starts where speech starts (or at
the end of the last committed word), and its opening frames are the ones the incremental
encoder reads worst: they were encoded before the speech after them was heard. So a window's
first commit sometimes begins a word or two late (base, German: "für den Ausfall" for "Die
Ursache für den Ausfall"), where offline Whisper, whose encoder reads the same audio in both
directions, has the opening words.

When a window's opening moved before its first commit (its hypotheses began with different
tokens: the session keeps them in ``WindowState.first_tokens``), or that commit is the window's
final decode (a client's item, a turn's end, the stream's end), that commit is checked once
(:func:`find_opening`): the window's audio so far is encoded again with every frame attending to
every other (with the silence continuation after it, as each step has it) and decoded with the
same prompt. When that reading starts with other words, read from audio before the stream's
opening, and then reads the stream's whole opening as the stream does (:func:`read_in_front`,
:func:`in_front`), those words are committed first. Nothing else changes: the stream decodes on
over its own frames, and an opening the second reading does not extend (nearly always, found
in one decoder pass) is committed as it was. Cost: an encoder pass over the window's frames so
far and a decoder pass or a few, per window checked (docs/journal/2026-12.md, entries 80, 90:
a committed item's ``finish()`` 138 → 155 ms of one core on average).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from susurrus.decoding.decode import LogitRules
from susurrus.model.caches import KV, DecoderCache
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import TextDecoder, Whisper
from susurrus.streaming.calls import CrossKV, DecodeTokens, Steps
from susurrus.streaming.commit import has_letters
from susurrus.streaming.config import StreamConfig
from susurrus.streaming.encoder import EncoderState, encode_padded, encode_steps
from susurrus.streaming.greedy import attention_at, best, scored
from susurrus.streaming.hallucination import opening_hallucinated
from susurrus.streaming.state import CrossBuffer, WindowState
from susurrus.streaming.vad import VadState
from susurrus.streaming.words import step_words

_T = TypeVar("_T")

MAX_IN_FRONT = 8  # tokens in front of the stream's opening at most: a word or two, not a sentence
MAX_REPLACED = 2  # the stream's opening words a reading may stand in place of


@dataclass
class Opening:
    """Tokens to commit in front of a window's first committed tokens, with the frame each read,
    its probability and its alignment-head attention (heads, tokens, 1500)."""

    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    attention: list[torch.Tensor] = field(default_factory=list, repr=False)  # (heads, 1500) per token
    replaced: int = 0  # the stream's first tokens these stand in place of (0: all in front)

    def add(self, token: int, frame: int, prob: float, attention: torch.Tensor) -> None:
        self.tokens.append(token)
        self.frames.append(frame)
        self.probs.append(prob)
        self.attention.append(attention)

    def prepend(self, tokens: list[int], frames: list[int], probs: list[float], qk: torch.Tensor,
                n_commit: int) -> tuple[list[int], list[int], list[float], torch.Tensor, int]:
        """A step's tokens, frames, probabilities, attention and commit count with these in
        place of its first :attr:`replaced` tokens."""
        k = self.replaced
        attention = [torch.stack(self.attention, dim=1)] if self.attention else []
        return (self.tokens + tokens[k:], self.frames + frames[k:], self.probs + probs[k:],
                torch.cat([*attention, qk[:, k:]], dim=1), n_commit - k + len(self.tokens))


def in_front(tokens: list[int], frames: list[int], opening_frame: int, text: str,
             starts_word: Callable[[int], bool]) -> bool:
    """Whether ``tokens`` (their text ``text``, the frames they read) are words in front of an
    opening read at ``opening_frame``: they start a word, hold a letter or digit, and none was
    read after the opening."""
    return (bool(tokens) and starts_word(tokens[0]) and any(c.isalnum() for c in text)
            and max(frames) <= opening_frame)


def _pick(dec: TextDecoder, rules: LogitRules, hidden: torch.Tensor, approx: torch.Tensor, qk: torch.Tensor,
          i: int, seq: list[int]) -> tuple[int, float, int, torch.Tensor]:
    """Position ``i``'s greedy token after ``seq`` (scored as a step scores it), its
    probability, the frame it read and its alignment-head attention."""
    row = scored(dec, rules, hidden, approx, i, seq)
    token = best(row)
    attn, frame = attention_at(qk, i)
    return token, float(torch.softmax(row, -1)[token]), frame, attn


def same_word(tok: Tokenizer, a: int, b: int) -> bool:
    """Whether tokens ``a`` and ``b`` hold the same letters, whatever their case and the space
    or punctuation around them (" not" and "not")."""
    def key(t: int) -> str:
        return "".join(c for c in tok.decode([t]).lower() if c.isalnum())
    return a != b and bool(key(a)) and key(a) == key(b)


def joins(opening: list[int], starts_word: Callable[[int], bool]) -> list[int]:
    """Where a reading may join a stream's ``opening``: its start and the starts of its second
    and third words (a reading replaces a word or two at most, never a sentence)."""
    starts = [k for k, t in enumerate(opening) if k == 0 or starts_word(t)]
    return starts[:MAX_REPLACED + 1]


def read_opening(net: Whisper, tok: Tokenizer, cross: list[KV], prompt: list[int], rules: LogitRules,
                 starts_word: Callable[[int], bool], opening: list[int]) -> Steps[Opening | None]:
    """How a decoder over ``cross`` (the window read as offline reads it) opens where the
    stream's committed ``opening`` does, or None when it opens the same way or does not join it.

    It joins the opening at one of :func:`joins` (after at most :data:`MAX_IN_FRONT` tokens of its
    own) and then reads every word of the rest of it as the stream does (punctuation may
    differ). Its own tokens before the join must be words read no later than the join
    (:func:`in_front`); they stand in place of the stream's tokens before the join: words in
    front ("für den Ausfall" → "Die Ursache für den Ausfall"), a first word heard otherwise
    ("S not" → "Ask not"), or none ("Stay with what I know" → "What I know": see
    :func:`find_opening` for when words may go). One decoder pass
    when it opens as the stream does (nearly always), a few more otherwise."""
    dec = net.decoder
    at = joins(opening, starts_word)
    reach = next((k for k in range(at[-1] + 1, len(opening)) if starts_word(opening[k])), len(opening))
    cache = DecoderCache(cross, [None] * len(dec.blocks))
    hidden, cache, qk, approx = yield DecodeTokens([*prompt, *opening], cache, skip=len(prompt) - 1)
    seq = list(prompt)
    found = Opening()
    while True:
        token, prob, frame, attn = _pick(dec, rules, hidden, approx, qk, 0, seq)
        k = next((k for k in at if opening[k] == token), None)
        if k is not None:
            break
        k = next((k for k in range(1, reach) if same_word(tok, token, opening[k])), None)
        if k is not None:  # joined inside one of the stream's words: "S-not" read " Ask", " not"
            found.add(token, frame, prob, attn)
            k += 1
            break
        if token >= tok.eot or len(found.tokens) == MAX_IN_FRONT:
            return None  # the opening is not reached
        found.add(token, frame, prob, attn)
        seq.append(token)
        cache = cache.rewind(len(seq) - 1, keep=True)
        hidden, cache, qk, approx = yield DecodeTokens([token, *opening], cache)
    if k == 0 and not found.tokens:
        return None  # it opens as the stream does
    if found.tokens and not in_front(found.tokens, found.frames, frame, tok.decode(found.tokens), starts_word):
        return None
    found.replaced = k
    rest = opening[k:]
    if k:  # read on from the join, after its own tokens
        seq = [*prompt, *found.tokens]
        cache = cache.rewind(len(seq) - 1, keep=True)
        hidden, cache, qk, approx = yield DecodeTokens([seq[-1], *rest], cache)
    for i in range(1, len(rest)):  # every word of the rest of the opening, read as the stream reads it
        if has_letters(tok.decode(rest[i:i + 1])) and _pick(dec, rules, hidden, approx, qk, i,
                                                            seq + rest[:i])[0] != rest[i]:
            return None
    return found


def read_both_ways(net: Whisper, win: WindowState, cross: CrossBuffer, n_real: int, running_max: float,
                   silence: int, final: bool, read: Callable[[list[KV]], Steps[_T]],
                   offline: bool = False) -> Steps[_T | None]:
    """``read`` (a decoder's reading over cross-attention keys and values) over the window's
    audio so far encoded again with every frame attending to every other, as offline Whisper
    encodes it (with ``silence`` frames of its continuation after it, as each step has them), or
    None when that encoding does not cover the step's ``n_real`` frames. ``offline``: encoded
    as offline Whisper encodes it instead, its frames attending to the silence padding a 30 s
    window too (:func:`encode_padded`; the positions after the audio keep the step's silence
    continuation). The cross-attention positions it writes are put back afterwards."""
    if offline:
        fresh = encode_padded(net, win.mel, running_max)
    else:
        enc = yield from encode_steps(net, EncoderState.empty(net), win.mel, None, final=final,
                                      running_max=running_max, silence=silence)
        if enc.frames != n_real:
            return None
        parts = [enc.outputs()] + ([enc.silence_out] if enc.silence_out is not None else [])  # every frame (0 on)
        fresh = torch.cat(parts, dim=1)
    saved = cross.save(0, max(fresh.shape[1], cross.real))
    try:
        cross.write(0, (yield CrossKV(fresh)))
        return (yield from read(cross.kv))
    finally:
        cross.load(saved)


def find_opening(net: Whisper, tok: Tokenizer, cfg: StreamConfig, win: WindowState, cross: CrossBuffer,
                 prompt: list[int], rules: LogitRules, starts_word: Callable[[int], bool], tokens: list[int],
                 probs: list[float], qk: torch.Tensor, n_commit: int, n_real: int, running_max: float, silence: int,
                 final: bool, vad: VadState | None) -> Steps[Opening | None]:
    """The words in front of a window's first commit (the first ``n_commit`` of a step's
    ``tokens``, with their ``probs`` and attention ``qk``, over ``n_real`` frames) that the
    window's audio so far, encoded in both directions (with ``silence`` frames of its
    continuation, as each step has them), puts there, or None (:func:`read_in_front`). The
    cross-attention positions it writes are put back. With the hallucination guard on, words
    it calls invented (over audio the VAD ``vad`` calls non-speech, or a phrase Whisper
    invents) are not taken. A reading that would only take the stream's first words away
    (none of its own in their place) is taken only where the guard calls those words invented:
    the stream's words over speech stay ("We know one.", which offline reads too, is not cut to
    "one." because the second reading opens at "one"); without a VAD no words go."""
    found = yield from read_both_ways(net, win, cross, n_real, running_max, silence, final,
                                      lambda kv: read_opening(net, tok, kv, prompt, rules, starts_word,
                                                              tokens[:n_commit]), offline=True)
    if found is None or vad is None:
        return None if found is not None and not found.tokens else found

    def words_within(toks: list[int], toks_probs: list[float], toks_qk: torch.Tensor, n: int, first: int) -> list:
        """The words of the first ``n`` tokens that end within the first ``first``."""
        words, ends = step_words(tok, toks[:n], n, toks_probs[:n], toks_qk[:, :n], n_real, win, None, 0.0)
        return [w for w, end in zip(words, ends) if end <= first]

    if not found.tokens:  # the stream's first found.replaced tokens would go
        gone = words_within(tokens, probs, qk, n_commit, found.replaced)
        return found if gone and opening_hallucinated(gone, vad, cfg.gate_threshold) else None
    if not cfg.hallucination_guard:
        return found
    joined, _, joined_probs, joined_qk, n_joined = found.prepend(tokens, [], probs, qk, n_commit)
    ahead = words_within(joined, joined_probs, joined_qk, n_joined, len(found.tokens))
    return found if ahead and not opening_hallucinated(ahead, vad, cfg.gate_threshold) else None
