"""Word timestamps from the cross-attention of the alignment heads, by dynamic time warping.

The decoder is run teacher-forced over the window's text tokens; the scores of the
checkpoint's alignment heads (which attend to the audio frame being spoken) are normalised,
smoothed with a median filter and averaged into a token-by-frame cost matrix. The cheapest
monotonic path through it gives each token's frame; words take the frames of their tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from susurrus.audio.features import TOKENS_PER_SECOND
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper, to_host

PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over the last axis with reflect padding (odd ``width``)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    shape = x.shape
    y = F.pad(x.reshape(-1, 1, shape[-1]), (pad, pad), mode="reflect").reshape(*shape[:-1], -1)
    return y.unfold(-1, width, 1).median(dim=-1).values


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Monotonic alignment path through ``cost`` (tokens x frames): (token idx, frame idx)."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf, dtype=np.float64)
    move = np.zeros((n + 1, m + 1), dtype=np.int8)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        # Row recursion: diagonal and vertical moves come from the previous row (vectorised),
        # horizontal moves chain along the row (a running scan).
        diag = acc[i - 1, :-1]
        up = acc[i - 1, 1:]
        best_prev = np.minimum(diag, up)
        choice = np.where(diag <= up, 0, 1).astype(np.int8)
        row = acc[i]
        c = cost[i - 1]
        for j in range(1, m + 1):
            left = row[j - 1]
            bp = best_prev[j - 1]
            if bp <= left:
                row[j] = c[j - 1] + bp
                move[i, j] = choice[j - 1]
            else:
                row[j] = c[j - 1] + left
                move[i, j] = 2
    i, j = n, m
    path_i, path_j = [], []
    while i > 0 and j > 0:
        path_i.append(i - 1)
        path_j.append(j - 1)
        step = move[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(path_i[::-1]), np.array(path_j[::-1])


@torch.inference_mode()
def find_alignment(net: Whisper, tokenizer: Tokenizer, text_tokens: list[int],
                   audio_features: torch.Tensor, num_frames: int,
                   medfilt_width: int = 7) -> list[WordTiming]:
    """Word timings (seconds from the window start) of ``text_tokens`` over ``num_frames``
    mel frames of real audio in the window."""
    if not text_tokens:
        return []
    tokens = [*tokenizer.sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    sample_begin = len(tokenizer.sot_sequence) + 1
    logits, _, qk = net.decoder(torch.tensor([tokens], device=net.device), net.decoder.new_cache(audio_features),
                                alignment_heads=net.alignment_heads)
    logits, qk = to_host(logits), to_host(qk)  # (float32 on the host: the alignment's math)
    probs = logits[0, sample_begin - 1:-1, : tokenizer.eot].softmax(dim=-1)
    token_probs = probs[torch.arange(len(text_tokens)), torch.tensor(text_tokens)].tolist()

    weights = qk[0, :, :, : num_frames // 2].float().softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = (weights - mean) / (std + 1e-10)
    weights = median_filter(weights, medfilt_width)
    matrix = weights.mean(dim=0)[sample_begin - 1:-1]  # queries that predict each text token
    text_idx, time_idx = dtw(-matrix.double().numpy())

    words, word_tokens = tokenizer.split_to_word_tokens(text_tokens + [tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    word_probs = [float(np.mean(token_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:])]
    return [WordTiming(w, t, float(s), float(e), p)
            for w, t, s, e, p in zip(words, word_tokens, starts, ends, word_probs)]


def merge_punctuations(alignment: list[WordTiming]) -> None:
    """Attach leading punctuation to the next word and trailing punctuation to the previous."""
    i = len(alignment) - 2
    j = len(alignment) - 1
    while i >= 0:
        prev, cur = alignment[i], alignment[j]
        if prev.word.startswith(" ") and prev.word.strip() in PREPEND_PUNCTUATION:
            cur.word = prev.word + cur.word
            cur.tokens = prev.tokens + cur.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, cur = alignment[i], alignment[j]
        if not prev.word.endswith(" ") and cur.word in APPEND_PUNCTUATION:
            prev.word = prev.word + cur.word
            prev.tokens = prev.tokens + cur.tokens
            cur.word, cur.tokens = "", []
        else:
            i = j
        j += 1


def clamp_long_words(alignment: list[WordTiming]) -> None:
    """Cap implausibly long words at sentence ends and at the start (the reference heuristic)."""
    durations = np.array([w.end - w.start for w in alignment])
    durations = durations[durations.nonzero()]
    median = float(np.median(durations)) if len(durations) else 0.0
    median = min(0.7, median)
    max_duration = median * 2
    if not len(durations):
        return
    sentence_end = set(".。!！?？")
    for i in range(1, len(alignment)):
        w = alignment[i]
        if w.end - w.start > max_duration:
            if w.word in sentence_end:
                w.end = w.start + max_duration
            elif alignment[i - 1].word in sentence_end:
                w.start = w.end - max_duration
    if alignment and alignment[0].end - alignment[0].start > max_duration:
        first = alignment[0]
        if len(alignment) > 1 and alignment[1].end - alignment[1].start > max_duration:
            boundary = max(alignment[1].end / 2, alignment[1].end - max_duration)
            first.end = alignment[1].start = boundary
        first.start = max(0.0, first.end - max_duration)


def speech_frames(mel: torch.Tensor, num_frames: int) -> np.ndarray:
    """Per mel frame (10 ms), whether it carries more energy than the window's noise floor.

    The threshold sits 15 % of the way from the floor (2nd percentile of frame energies) to
    the loud frames (95th percentile), so it adapts to the recording's noise level."""
    energy = mel[:, :num_frames].float().mean(dim=0).numpy()
    if energy.size == 0:
        return np.zeros(0, dtype=bool)
    floor, loud = np.percentile(energy, 2), np.percentile(energy, 95)
    if loud - floor < 0.1:  # no contrast: all speech or all silence; do not refine
        return np.ones_like(energy, dtype=bool)
    return energy > floor + 0.15 * (loud - floor)


def refine_with_energy(alignment: list[WordTiming], speech: np.ndarray, min_pause: int = 8,
                       max_stray: int = 12, claimed: float = 0.0) -> None:
    """Fix the two ways attention-based word times go wrong at pauses.

    * A word that lies mostly in silence, with unclaimed speech between it and the previous
      word, is moved onto that speech (the attention placed it after its sound).
    * A word that starts (ends) with a pause of at least ``min_pause`` frames, before which
      (after which) lie at most ``max_stray`` frames of sound (the neighbour's tail), has the
      pause trimmed off: the first word after a pause tends to absorb it.
    Times are in seconds from the window start; ``speech`` is per 10 ms frame; the audio before
    ``claimed`` (s) belongs to earlier words (a stream's committed ones): no word moves into it."""
    fps = 100
    n = len(speech)
    if n == 0 or speech.all():
        return
    prev_end = claimed
    for w in alignment:
        if not w.word:
            continue
        a, b = int(round(w.start * fps)), int(round(w.end * fps))
        a, b = min(max(a, 0), n), min(max(b, 0), n)
        span = speech[a:b]
        mostly_silent = span.size == 0 or span.mean() < 0.4
        gap_a = int(round(prev_end * fps))
        if mostly_silent and a - gap_a >= 5:
            gap = speech[gap_a:a]
            voiced_runs = _runs(gap)
            if voiced_runs and voiced_runs[-1][1] - voiced_runs[-1][0] >= 5:
                onset, offset = gap_a + voiced_runs[-1][0], gap_a + voiced_runs[-1][1]
                w.start, w.end = onset / fps, offset / fps
                a, b = onset, offset
        # trim a leading or trailing pause (with at most a few frames of sound beyond it)
        span = speech[a:b]
        silent_runs = _runs(~span)
        for lo, hi in silent_runs:
            before, after = span[:lo].sum(), span[hi:].sum()
            if hi - lo >= min_pause and before <= max_stray and before < after:
                w.start = (a + hi - 2) / fps
                break
        for lo, hi in reversed(silent_runs):
            before, after = span[:lo].sum(), span[hi:].sum()
            if hi - lo >= min_pause and after <= max_stray and after < before:
                w.end = (a + lo + 3) / fps
                break
        w.start, w.end = float(w.start), float(max(w.end, w.start))
        prev_end = w.end
    _snap_to_speech_runs([w for w in alignment if w.word], speech, fps, claimed=int(round(claimed * fps)))


def _snap_to_speech_runs(words: list[WordTiming], speech: np.ndarray, fps: int, max_shift: int = 50,
                         claimed: int = 0) -> None:
    """After a pause, attention marks a word's start late (and before one, its end early):
    extend a word edge that lies inside a speech run to that run's edge, when no neighbouring
    word (nor an earlier one, before frame ``claimed``) claims the frames in between."""
    runs = _runs(speech)
    if not runs:
        return
    onsets = np.array([lo for lo, _ in runs])
    offsets = np.array([hi for _, hi in runs])
    for k, w in enumerate(words):
        a, b = int(round(w.start * fps)), int(round(w.end * fps))
        prev_end = int(round(words[k - 1].end * fps)) if k else claimed
        next_start = int(round(words[k + 1].start * fps)) if k + 1 < len(words) else len(speech)
        r = np.searchsorted(onsets, a, side="right") - 1  # the run containing frame a
        if r >= 0 and offsets[r] > a and prev_end <= onsets[r] < a and a - onsets[r] <= max_shift:
            w.start = float(onsets[r] / fps)
        r = np.searchsorted(onsets, b - 1, side="right") - 1
        if r >= 0 and offsets[r] > b - 1 and b < offsets[r] <= next_start and offsets[r] - b <= max_shift:
            w.end = float(offsets[r] / fps)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges of the True runs of a boolean array."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(lo), int(hi)) for lo, hi in zip(edges[::2], edges[1::2])]
