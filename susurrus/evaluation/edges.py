"""The edges of a text: its opening words and its last word, stream against offline.

Whole-item WER hides where a stream's errors sit. The opening words are the ones a stream reads
with the least right context (a window's first commit; a turn that opens with silence), and the
last word the one its final decode reads at the audio's end: each is measured against offline
Whisper on the same audio, the reference a stream is built to match.

- **Opening**: the errors that touch offline's first :data:`OPENING_WORDS` words when the
  stream's whole text is aligned with offline's (a word of them substituted or missing, or a word
  inserted before the last of them), as a WER over those words. The same measure of offline over
  the audio 10 ms later (``--offline-spread``) is its noise floor: how far offline's own opening
  moves with a harmless change of its input. Beside it, the same measure against the reference,
  for the stream and for offline: whether the stream's openings that differ from offline's are
  errors or another reading that is as often right (on hard speech offline's own openings are
  often wrong).
- **Last word**: on the items where offline's last word is the reference's, whether the
  stream's last word is that word too; and the same of offline 10 ms later, its noise floor.

Words are compared after the bench's normalisation (:func:`~susurrus.evaluation.metrics.normalize`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from susurrus.evaluation.alignment import edit_table
from susurrus.evaluation.metrics import normalize

OPENING_WORDS = 3


class Texts(Protocol):
    language: str
    reference: str | None
    stream_text: str
    offline_text: str
    shifted_text: str | None


def _words(text: str, language: str) -> list[str]:
    return normalize(text, language).split()


def opening_errors(against: str, hyp: str, language: str = "en", n: int = OPENING_WORDS) -> tuple[int, int]:
    """(errors touching the first ``n`` words of ``against``, how many words that is) on a
    minimum-edit alignment of ``hyp`` with ``against``."""
    ref, out = _words(against, language), _words(hyp, language)
    if not ref:
        return 0, 0
    cost = edit_table(ref, out)
    i, j, errors = len(ref), len(out), 0
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != out[j - 1]):
            errors += ref[i - 1] != out[j - 1] and i - 1 < n
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:  # offline's word i - 1 missing
            errors += i - 1 < n
            i -= 1
        else:  # a word inserted after offline's first i words
            errors += i < n
            j -= 1
    return errors, min(n, len(ref))


def last_word_kept(item: Texts, text: str | None = None) -> bool | None:
    """Whether the stream's last word (or that of ``text``, another reading of the item) is
    offline's, on an item whose offline last word is the reference's (None on the others, and
    without a reference)."""
    if not item.reference:
        return None
    ref, off = _words(item.reference, item.language), _words(item.offline_text, item.language)
    if not ref or not off or off[-1] != ref[-1]:
        return None
    out = _words(item.stream_text if text is None else text, item.language)
    return bool(out) and out[-1] == off[-1]


HEADER = (f"| setting | items | first {OPENING_WORDS} words, stream against offline: WER % (items with an error) "
          f"| offline 10 ms later against offline: WER % (items) "
          f"| first {OPENING_WORDS} words against the reference, stream / offline: WER % "
          f"| last word as offline's, where offline's is right | offline 10 ms later: the same |\n"
          "|---|---|---|---|---|---|---|")


def row(label: str, items: Sequence[Texts]) -> str:
    """One table row over ``items`` (their opening measured against offline, with the one-frame
    shift's beside it when the items carry it)."""
    pairs = [opening_errors(i.offline_text, i.stream_text, i.language) for i in items]
    shifted = [opening_errors(i.offline_text, i.shifted_text, i.language) for i in items if i.shifted_text is not None]
    kept = [k for i in items if (k := last_word_kept(i)) is not None]
    kept_shifted = [k for i in items
                    if i.shifted_text is not None and (k := last_word_kept(i, i.shifted_text)) is not None]
    scored = [i for i in items if i.reference]
    against_ref = [(opening_errors(i.reference, i.stream_text, i.language),
                    opening_errors(i.reference, i.offline_text, i.language)) for i in scored]

    def rate(counts: list[tuple[int, int]]) -> str:
        return f"{100.0 * sum(e for e, _ in counts) / max(1, sum(u for _, u in counts)):.2f}"

    def cell(counts: list[tuple[int, int]]) -> str:
        return f"{rate(counts)} ({sum(e > 0 for e, _ in counts)})" if counts else "-"

    def share(flags: list[bool]) -> str:
        return f"{sum(flags)}/{len(flags)} ({100.0 * sum(flags) / len(flags):.1f} %)" if flags else "-"

    ref = f"{rate([s for s, _ in against_ref])} / {rate([o for _, o in against_ref])}" if scored else "-"
    return (f"| {label} | {len(items)} | {cell(pairs)} | {cell(shifted)} | {ref} | {share(kept)} "
            f"| {share(kept_shifted)} |")
