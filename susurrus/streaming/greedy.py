"""One step's decode: the forced prefix (prompt + committed tokens) over a kept decoder cache,
the previous hypothesis verified in one batched pass, then greedy decoding that stops where its
tokens stop being worth committing (read at the audio edge or in the silence after it, a loop:
a phrase a third time in a row the audio does not hold, ``repeats.py``; the decoder starting
over) and refuses end-of-text while speech remains (``guards.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from susurrus.decoding.decode import LogitRules
from susurrus.model.caches import KV, DecoderCache
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import TextDecoder, Whisper
from susurrus.streaming.calls import DecodeTokens, Steps
from susurrus.streaming.config import FRAME_S, StreamConfig
from susurrus.streaming.guards import (
    eot_too_early,
    says_again,
    speech_mask,
    starts_over,
    stuck_from,
    thrice_at_end,
)
from susurrus.streaming.repeats import copy_frames, saying_read
from susurrus.streaming.state import WindowState


def scored(dec: TextDecoder, rules: LogitRules, hidden: torch.Tensor, approx: torch.Tensor, i: int,
           seq: list[int]) -> torch.Tensor:
    """Position ``i``'s logits after ``seq``: the logit rules over its int8 shortlist logits,
    the shortlist rescored exactly (:meth:`TextDecoder.rescore`)."""
    row = approx[i].clone()
    rules(row[None], [seq])
    return dec.rescore(hidden[0, i], row)


def best(row: torch.Tensor) -> int:
    """The index of ``row``'s largest entry (the first, if tied), as ``row.argmax()``: numpy's
    argmax over the same float32 values (~5 µs for a vocabulary-wide row on CPU, where
    torch's one-dimensional argmax takes ~50 µs; a step asks it twice per token)."""
    return int(np.argmax(row.numpy()))


def attention_at(qk: torch.Tensor, i: int) -> tuple[torch.Tensor, int]:
    """Position ``i``'s alignment-head attention (heads, 1500) and the frame it reads most."""
    attn = qk[0, :, i].float().softmax(-1)
    return attn, int(attn.mean(0).argmax())


@dataclass
class StepDecode:
    """A step's decoded tokens, the frame each attends to when predicted, their probabilities,
    the alignment-head attention (heads, tokens, 1500), the decoder cache of the path, the
    token predicted after the last one kept (it tells if a word ended), and whether it stopped
    at a loop."""

    tokens: list[int]
    frames: list[int]
    probs: list[float]
    qk: torch.Tensor
    cache: DecoderCache
    following: int | None
    looped: bool


def decode_step(net: Whisper, tok: Tokenizer, cfg: StreamConfig, win: WindowState, cross_kv: list[KV],
                prompt: list[int], rules: LogitRules, starts_word: Callable[[int], bool], n_real: int, final: bool,
                relaxed: bool = False) -> Steps[StepDecode]:
    """Force prompt + committed tokens, then decode greedily.

    The forced prefix's self-attention keys/values are kept between steps (only its last
    token is recomputed), and the previous step's uncommitted hypothesis is verified in one
    batched pass (speculatively): tokens the model still predicts are accepted together,
    and greedy decoding continues one token at a time only from where it diverges.
    ``win.prefix`` is updated: the decoder cache of the forced prefix but its last token. A
    generator of model calls (:mod:`calls`): one decoder pass for the prefix and hypothesis, then
    one per token past it."""
    forced = prompt + win.committed
    heads = net.alignment_heads
    base_len = len(forced) - 1
    hyp = list(win.last_hypothesis)
    dec = net.decoder
    if win.prefix is None or not cfg.reuse_prefix or not win.committed:
        # (until something is committed the prefix is just the prompt: recompute it, in the
        # same pass as the hypothesis, so that it reads the audio as it is now)
        cache = DecoderCache(cross_kv, [None] * len(dec.blocks))
        hidden, cache, qk, approx = yield DecodeTokens([*forced, *hyp], cache, skip=base_len)
        win.prefix = cache.rewind(base_len)
    else:
        hidden, cache, qk, approx = yield DecodeTokens([forced[-1], *hyp], win.prefix)
    # approx: int8 logits; the exact logits of their shortlist come per position below
    budget = cfg.max_step_tokens if not final else 4 * cfg.max_step_tokens  # the last step says it all
    limit = max(0, min(budget, net.dims.n_text_ctx - len(forced) - 1))
    seq = list(forced)
    tokens: list[int] = []
    frames: list[int] = []
    probs: list[float] = []
    attns: list[torch.Tensor] = []
    speech = None
    forced = -1  # after a refused end-of-text: the furthest frame read when it was refused
    glitched = False
    edge = round(cfg.interim_edge_ms / 1000 / FRAME_S)
    aligned = cfg.task == "transcribe"
    following = None  # the token predicted after the last one kept (it tells if a word ended)
    looped = False
    word_at: list[int] = []  # the indices in ``tokens`` of the tokens that start words
    i = 0  # position in the current hidden/qk that predicts the next token
    while len(tokens) < limit:
        row = scored(dec, rules, hidden, approx, i, seq)
        if cfg.eot_guard and aligned and best(row) == tok.eot and len(tokens) < 2 * cfg.max_step_tokens:
            # end-of-text guard: refuse it while speech remains after the last token (where the
            # tokens were read: a translation's attention does not follow the audio, so its end
            # is the decoder's, as offline)
            if speech is None:
                speech = speech_mask(win.mel, n_real)
            last = max(frames, default=win.committed_end_frame)
            if eot_too_early(speech, last, n_real, final):
                row[tok.eot] = -float("inf")
                if final:  # what follows must read past it (a window's last step: nothing comes after)
                    forced = last
        nxt = best(row)
        following = nxt
        if nxt == tok.eot:
            break
        attn, frame = attention_at(qk, i)  # where it looked to predict
        if not aligned:
            pass  # translating: the alignment heads do not follow the audio; agreement decides
        elif frame >= n_real and not final:
            if not relaxed or glitched or (frames and frames[-1] >= n_real):
                break  # it reads the silence after the audio: what follows is invention
            glitched = True
        elif frame >= n_real - edge and not final and not relaxed:
            break  # too close to the edge to be stable: not worth a decoder pass yet
        elif final and frame >= n_real + 10 and starts_word(nxt):
            break  # at the end too, a new word read in the silence after the audio is invented
        ahead = seq + [nxt]
        n_rep = thrice_at_end(ahead)
        if n_rep:  # a phrase about to be said a third time in a row: the speaker's, or a decoding loop
            if speech is None:
                speech = speech_mask(win.mel, n_real)
            phrase = ahead[-n_rep:]
            if not (aligned and saying_read(*copy_frames([*frames, frame], len(tokens) + 1, n_rep),
                                            [starts_word(t) for t in phrase], win.committed_end_frame,
                                            n_real, speech)):
                looped = True
                break  # the audio does not hold it: a decoding loop (repeats.py)
        if aligned and starts_word(nxt):
            read_at = [frames[k] for k in word_at]  # where this step's words were read: their first tokens
            word_at.append(len(tokens))
            stuck = stuck_from([*read_at, frame])
            if stuck is not None:  # words recited without the attention moving: not the audio's
                cut = word_at[stuck]  # (a word before nxt: the run holds STUCK_WORDS >= 2 words)
                following = tokens[cut]
                del tokens[cut:], probs[cut:], attns[cut:], frames[cut:]
                looped = True
                break
            if not relaxed and starts_over(
                    frame, read_at, forced, win.committed_end_frame, cfg.reread_frames,
                    lambda: says_again(tok.decode([nxt]), tok.decode(win.committed))):  # noqa: B023 (called here)
                break  # a new word read from audio already transcribed: the decoder is starting over
        tokens.append(nxt)
        probs.append(float(torch.softmax(row, -1)[nxt]))
        attns.append(attn)
        frames.append(frame)
        seq.append(nxt)
        following = None
        if i + 1 < hidden.shape[1] and hyp[i] == nxt:
            i += 1  # the batch already holds the position after this token
            continue
        # diverged from (or ran past) the verified hypothesis: continue one token at a time
        cache = cache.rewind(base_len + len(tokens), keep=True)  # the path up to the token before nxt
        hidden, cache, qk, approx = yield DecodeTokens([nxt], cache)
        hyp, i = [], 0
    qk_all = (torch.stack(attns, dim=1) if attns
              else torch.zeros(int(heads.sum()), 0, net.dims.n_audio_ctx))
    return StepDecode(tokens, frames, probs, qk_all, cache, following, looped)

