"""Matching hypothesis words to reference words, for timing metrics."""

from __future__ import annotations

from collections.abc import Sequence

from susurrus.evaluation.metrics import normalize
from susurrus.types import Word


def align_words(ref: Sequence[str], hyp: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs (ref index, hyp index) of equal words on a minimum-edit alignment."""
    n, m = len(ref), len(hyp)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            sub = cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1])
            cost[i][j] = min(sub, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            if ref[i - 1] == hyp[j - 1]:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def normalized_words(words: Sequence[Word]) -> tuple[list[str], list[int]]:
    """Normalised tokens of hypothesis words and, per token, the index of its word."""
    tokens, owner = [], []
    for k, w in enumerate(words):
        for t in normalize(w.word).split():
            tokens.append(t)
            owner.append(k)
    return tokens, owner


def boundary_errors(segments: Sequence[dict], words: Sequence[Word],
                    ) -> list[tuple[float, float] | None]:
    """Per reference utterance: (first word start - segment start, last word end - segment end),
    or None where its first or last normalised word has no match in the hypothesis."""
    ref_tokens: list[str] = []
    ref_owner: list[int] = []
    for k, seg in enumerate(segments):
        for t in normalize(seg["text"]).split():
            ref_tokens.append(t)
            ref_owner.append(k)
    hyp_tokens, hyp_owner = normalized_words(words)
    match = dict(align_words(ref_tokens, hyp_tokens))
    out = []
    for k, seg in enumerate(segments):
        idx = [i for i, o in enumerate(ref_owner) if o == k]
        if not idx or idx[0] not in match or idx[-1] not in match:
            out.append(None)
            continue
        first, last = words[hyp_owner[match[idx[0]]]], words[hyp_owner[match[idx[-1]]]]
        out.append((first.start - seg["start_s"], last.end - seg["end_s"]))
    return out
