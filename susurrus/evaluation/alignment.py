"""Matching hypothesis words to reference words, for timing metrics."""

from __future__ import annotations

from collections.abc import Sequence

from susurrus.evaluation.metrics import normalize
from susurrus.types import Word


def edit_table(ref: Sequence[str], hyp: Sequence[str]) -> list[list[int]]:
    """Levenshtein costs: ``table[i][j]`` turns ``ref[:i]`` into ``hyp[:j]`` (trace back from
    ``[len(ref)][len(hyp)]`` for an alignment)."""
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
    return cost


def align_words(ref: Sequence[str], hyp: Sequence[str], substitutions: bool = False,
                ) -> list[tuple[int, int]]:
    """Pairs (ref index, hyp index) on a minimum-edit alignment: equal words, and with
    ``substitutions`` also the words the alignment substitutes for each other."""
    n, m = len(ref), len(hyp)
    cost = edit_table(ref, hyp)
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            if substitutions or ref[i - 1] == hyp[j - 1]:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def normalized_words(words: Sequence[Word], language: str = "en", unit: str = "word") -> tuple[list[str], list[int]]:
    """Normalised tokens (characters for ``unit="char"``) of words and, per token, the index of
    its word."""
    tokens, owner = [], []
    for k, w in enumerate(words):
        text = normalize(w.word, language)
        for t in (list(text.replace(" ", "")) if unit == "char" else text.split()):
            tokens.append(t)
            owner.append(k)
    return tokens, owner


def boundary_errors(segments: Sequence[dict], words: Sequence[Word],
                    ) -> list[tuple[float, float] | None]:
    """Per reference utterance: (first word start - segment start, last word end - segment end),
    where first/last are the earliest/latest hypothesis words aligned to the utterance's words
    (equal or substituted: this measures timing, not recognition); None if none is aligned."""
    ref_tokens: list[str] = []
    ref_owner: list[int] = []
    for k, seg in enumerate(segments):
        for t in normalize(seg["text"]).split():
            ref_tokens.append(t)
            ref_owner.append(k)
    hyp_tokens, hyp_owner = normalized_words(words)
    match = dict(align_words(ref_tokens, hyp_tokens, substitutions=True))
    out: list[tuple[float, float] | None] = []
    for k, seg in enumerate(segments):
        hyp_idx = [match[i] for i, o in enumerate(ref_owner) if o == k and i in match]
        if not hyp_idx:
            out.append(None)
            continue
        first, last = words[hyp_owner[min(hyp_idx)]], words[hyp_owner[max(hyp_idx)]]
        out.append((first.start - seg["start_s"], last.end - seg["end_s"]))
    return out
