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

# a word's length (0.5 s) past the frame its token read most: where the audio a decode read ends
READ_PAST_FRAMES = 25


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


def aligned_span(qk: torch.Tensor, f0: int, n_real: int) -> tuple[list[int], int]:
    """The tokens and frames a step's DTW aligns: the tokens read from the audio (at least half
    their attention on its ``n_real`` frames), over frames ``f0`` up to :data:`READ_PAST_FRAMES`
    past the last frame one of them read most, or past ``f0`` if that is later (the audio's edge
    at most). A token read in the silence past
    the audio (a closing full stop, a guess at the window's end) says nothing of where it lies:
    in the DTW its attention, spread thin over the audio, would take the whole span from the
    words before it, whose times then collapse onto ``f0``; and the audio after the last word
    read would go to the words committed (no word ends past ``stop``)."""
    attention = qk.float().mean(0)
    peaks = attention.argmax(-1).tolist()
    # (by its attention's mass, not its peak: a near-tie between two peaks, one past the audio,
    # must not move the words, as the float rounding of a batched step may flip it)
    kept = [t for t, inside in enumerate(attention[:, :n_real].sum(-1).tolist()) if inside >= 0.5]
    read = [peaks[t] for t in kept if peaks[t] < n_real]
    # (at least READ_PAST_FRAMES past ``f0``, so that the span does not jump with ``f0``)
    stop = max(max(read) + 1, f0) + READ_PAST_FRAMES if read else n_real
    return kept, max(min(stop, n_real), min(n_real, f0 + 2))


def step_words(tok: Tokenizer, tokens: list[int], n_commit: int, probs: list[float], qk: torch.Tensor, n_real: int,
               win: WindowState, last_end: float | None, emitted: float) -> tuple[list[StreamWord], list[int]]:
    """Times of the first ``n_commit`` tokens' words (and, per word, the tokens up to its
    end), from a DTW over this step's tokens (the uncommitted ones absorb the audio after
    them) from the last committed word's end to the audio they read (:func:`aligned_span`), refined at pauses with the
    window's energy as offline. No word starts before ``last_end`` (the last committed
    word's end, s) or before the one before it; ``emitted``: the words' ``emitted_at``."""
    f0 = max(0, min(win.committed_end_frame, n_real - 1))
    kept, stop = aligned_span(qk, f0, n_real)
    first, last = np.zeros(len(tokens), dtype=int), np.zeros(len(tokens), dtype=int)
    if kept:
        first[kept], last[kept] = token_frames(qk[:, kept], f0, stop)
    for t in range(len(tokens)):  # a token read past the audio sits where the one before it ends
        if t not in kept:
            first[t] = last[t] = last[t - 1] if t else 0
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
    refine_with_energy(timings, speech, claimed=f0 * FRAME_S)  # the committed words' audio is theirs
    read_end = stop * FRAME_S  # (a last word is snapped to the end of its run of speech: not past what was read)
    for t in timings:
        t.end = min(t.end, read_end)
        t.start = min(t.start, t.end)
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


def read_span(frames: list[int], n_real: int, win: WindowState) -> tuple[float, float] | None:
    """The span (s of stream audio) of the encoder ``frames`` that tokens attended to, those
    inside the window's ``n_real`` audio frames; None when there are none."""
    inside = [f for f in frames if f < n_real]
    if not inside:
        return None
    offset = win.start_frame / 100.0
    return offset + min(inside) * FRAME_S, offset + (max(inside) + 1) * FRAME_S
