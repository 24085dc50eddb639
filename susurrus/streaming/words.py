"""Word timing for committed tokens: where each token sits in the audio (dynamic time warping
over the alignment heads' attention, from the last committed word's end to the audio edge),
grouped into words and refined at pauses with the window's energy, as offline
(``decoding/alignment.py``)."""

from __future__ import annotations

import numpy as np
import torch

from susurrus.decoding.alignment import (
    WordTiming,
    dtw,
    median_filter,
    merge_punctuations,
    refine_with_energy,
    speech_frames,
)
from susurrus.model.tokenizer import Tokenizer
from susurrus.streaming.config import FRAME_S, UNSPACED_LANGUAGES
from susurrus.streaming.events import StreamWord
from susurrus.streaming.state import WindowState


def starts_word(piece: str, language: str | None) -> bool:
    """Whether a token whose text is ``piece`` starts a word (in a language written without
    spaces, any whole character may end one)."""
    if language in UNSPACED_LANGUAGES:
        return "\ufffd" not in piece
    return piece.startswith(" ")


def token_frames(qk: torch.Tensor, f0: int, n_real: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's first and last frame (from ``f0``) on the DTW path through the alignment
    heads' attention ``qk`` (heads, tokens, frames) over frames ``f0 .. n_real``, normalised per
    token, standardised across tokens and median-filtered; zeros under two frames."""
    weights = qk[:, :, f0:n_real]  # (heads, tokens, frames)
    n_tok = qk.shape[1]
    first = np.zeros(n_tok, dtype=int)
    last = np.zeros(n_tok, dtype=int)
    if weights.shape[2] >= 2:
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-9)
        if n_tok > 1:
            std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
            weights = (weights - mean) / (std + 1e-10)
        matrix = median_filter(weights, 7).mean(0)
        text_idx, time_idx = dtw(-matrix.double().numpy())
        for ti, fi in zip(text_idx[::-1], time_idx[::-1]):
            first[ti] = fi
        for ti, fi in zip(text_idx, time_idx):
            last[ti] = fi
    return first, last


def step_words(tok: Tokenizer, tokens: list[int], n_commit: int, probs: list[float], qk: torch.Tensor, n_real: int,
               win: WindowState, last_end: float | None, emitted: float) -> tuple[list[StreamWord], list[int]]:
    """Times of the first ``n_commit`` tokens' words (and, per word, the tokens up to its
    end), from a DTW over this step's tokens (the uncommitted ones absorb the audio after
    them) from the last committed word's end to the audio edge, refined at pauses with the
    window's energy as offline. No word starts before ``last_end`` (the last committed
    word's end, s) or before the one before it; ``emitted``: the words' ``emitted_at``."""
    f0 = max(0, min(win.committed_end_frame, n_real - 1))
    first, last = token_frames(qk, f0, n_real)
    words, groups = tok.split_to_word_tokens(tokens)
    timings: list[WordTiming] = []
    k = 0
    for word, group in zip(words, groups):
        a, b = k, k + len(group)
        k = b
        timings.append(WordTiming(word, group, (f0 + first[a]) * FRAME_S, (f0 + last[b - 1] + 1) * FRAME_S,
                                  float(np.mean(probs[a:b]))))
    merge_punctuations(timings)
    speech = speech_frames(win.mel, win.mel.shape[1])
    refine_with_energy(timings, speech)
    offset = win.start_frame / 100.0
    out: list[StreamWord] = []
    ends: list[int] = []
    taken = 0
    for t in timings:
        if taken >= n_commit:
            break
        taken += len(t.tokens)
        if not t.word:
            continue
        ends.append(taken)
        start, end = offset + t.start, offset + t.end
        if last_end is not None and start < last_end:
            start = last_end
        if out and start < out[-1].end:
            start = out[-1].end
        out.append(StreamWord(t.word, round(start, 3), round(max(end, start), 3), emitted,
                              round(t.probability, 4)))
    return out, ends


def end_frame(word: StreamWord, win: WindowState) -> int:
    """The window's encoder frame where ``word`` ends."""
    return int(round((word.end - win.start_frame / 100.0) / FRAME_S))
