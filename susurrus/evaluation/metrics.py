"""Word and character error rates after Whisper's text normalisation."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence


@functools.lru_cache(maxsize=2)
def _normalizer(language: str):
    if language == "en":
        from whisper_normalizer.english import EnglishTextNormalizer

        return EnglishTextNormalizer()
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer()


@functools.lru_cache(maxsize=1)
def _to_simplified():
    from opencc_purepy import OpenCC

    return OpenCC("t2s").convert


_DIGITS = "zero one two three four five six seven eight nine".split()
# digits alone: not in "15th", nor amounts, percentages and decimals ("$3.50", "5%"), which the
# normaliser reads as a whole
_DIGIT_RUN = re.compile(r"(?<![\w.$£€])\d+(?![\w%]|[.,]\d*%|\.\d)")


def normalize(text: str, language: str = "en") -> str:
    """Whisper's English normaliser for English, its basic normaliser otherwise; then every
    number is scored digit by digit.

    Whisper writes a spoken digit string as "1,0001 90210" or "6, 9, 8." and its normaliser
    turns number words into numbers ("six nine eight" -> "698") but groups them at random
    ("one" alone stays a word, "0," is dropped): digits are spelled out before the normaliser
    and every number after it is split into its digits, so "SIX NINE EIGHT" and "6, 9, 8."
    both read "6 9 8" and a wrong digit is one error, not a whole number.

    Chinese is scored in simplified characters, the reference and the hypothesis alike
    (OpenCC's t2s), as Chinese recognition is usually scored: which script Whisper writes
    Mandarin in is a near-tie its padding or its first token decides ("想听" or "想聽"), not a
    word heard wrong."""
    if language == "zh":
        return _normalizer("other")(_to_simplified()(text))
    if language != "en":
        return _normalizer("other")(text)
    spelled = _DIGIT_RUN.sub(lambda m: " ".join(_DIGITS[int(d)] for d in m.group()), text)
    return " ".join(re.sub(r"(\d)", r" \1 ", _normalizer("en")(spelled)).split())


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def error_counts(ref: str, hyp: str, language: str = "en", unit: str = "word") -> tuple[int, int]:
    """(errors, reference length) after normalisation; ``unit`` is "word" or "char"."""
    r, h = normalize(ref, language), normalize(hyp, language)
    if unit == "char":
        rs, hs = list(r.replace(" ", "")), list(h.replace(" ", ""))
    else:
        rs, hs = r.split(), h.split()
    return edit_distance(rs, hs), len(rs)


def corpus_error_rate(pairs: Sequence[tuple[str, str]], language: str = "en", unit: str = "word") -> float:
    """Pooled error rate in percent over (reference, hypothesis) pairs."""
    errors = total = 0
    for ref, hyp in pairs:
        e, n = error_counts(ref, hyp, language, unit)
        errors += e
        total += n
    return 100.0 * errors / max(1, total)
