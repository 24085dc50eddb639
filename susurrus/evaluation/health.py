"""Stream health: loops, stalls, lost speech and agreement with the offline model.

These need no reference transcript: they compare a stream with the same model's offline
transcription of the same audio, so unlabelled recordings can be checked too.

* :func:`longest_repetition` — the most times a phrase (up to a long sentence) is committed
  back to back ("1 1 1 1" is 4; a decoding loop).
* :func:`commit_delays` — for each word the offline model heard, how long after its end the
  stream first committed it (the same word, by a text alignment) or a word reaching that point
  of the audio: a stall shows as a long delay, whether the stream's words are right or not.
* :func:`gated_words` — offline words lying in audio the voice activity gate never let the
  engine encode (``StreamSession.skipped``), and :func:`lost_words`, those of them the stream's
  text does not have: speech the gate deleted.
* :func:`agreement_error` — WER of the stream's text against the offline text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from susurrus.evaluation.alignment import align_words, normalized_words
from susurrus.evaluation.metrics import error_counts
from susurrus.streaming.guards import LOOP_WORDS, word_key


class TimedWord(Protocol):
    word: str
    start: float
    end: float


def longest_repetition(words: Sequence[str], longest: int = LOOP_WORDS) -> int:
    """How many times in a row the most repeated phrase of 1..``longest`` words occurs
    (1 when nothing repeats). Words are compared without case and punctuation (not with
    Whisper's normaliser, which joins spoken digits: "1 1 1" would become one number).
    Linear in the words per phrase length: a phrase of n words said k times in a row is a run
    of (k - 1) n positions where a word equals the word n after it."""
    tokens = [t for t in map(word_key, " ".join(words).split()) if t]
    best = 1 if tokens else 0
    for n in range(1, min(longest, len(tokens) // 2) + 1):
        run = 0
        for i in range(len(tokens) - n):
            run = run + 1 if tokens[i] == tokens[i + n] else 0
            best = max(best, run // n + 1)
    return best


def repetition_cell(pairs: Sequence[tuple[int, int]]) -> str:
    """The bench's repetition figures over items' ``(stream, offline)`` longest repetitions
    (:func:`longest_repetition`): the stream's longest, offline's longest, the items where
    offline says a phrase k >= 3 times in a row whose stream keeps k - 1 of them, and the loops:
    items where the stream says a phrase more than twice and more often than offline does."""
    if not pairs:
        return "-"
    said = [(s, o) for s, o in pairs if o >= 3]
    kept = sum(s >= o - 1 for s, o in said)
    loops = sum(s > max(2, o) for s, o in pairs)
    return f"{max(s for s, _ in pairs)} ({max(o for _, o in pairs)}; {kept}/{len(said)}; {loops})"


def commit_delays(stream_words: Sequence, offline_words: Sequence[TimedWord], audio_s: float,
                  tolerance_s: float = 0.3, language: str = "en", unit: str = "word") -> list[float]:
    """Per offline word, seconds from its end until the stream committed it: the first commit of
    the stream's word that a minimum-edit alignment of the two texts matches to it, or of a
    word ending at or after it (less ``tolerance_s``: the stream misread it), whichever came
    first; a stream that does neither counts until the audio's end. (Two models' timings of a
    word before a pause differ most: offline Whisper often stretches such a word far into the
    pause, or times it inside it; by time alone the pause would count as speech left
    uncommitted.)"""
    ends = [(w.emitted_at, w.end) for w in stream_words]
    matched: dict[int, float] = {}
    if stream_words and offline_words:
        ref, ref_owner = normalized_words(offline_words, language, unit)
        hyp, hyp_owner = normalized_words(stream_words, language, unit)
        for i, j in align_words(ref, hyp):
            k, emitted = ref_owner[i], stream_words[hyp_owner[j]].emitted_at
            matched[k] = min(matched.get(k, emitted), emitted)
    delays = []
    for k, w in enumerate(offline_words):
        reached = [emitted for emitted, end in ends if end >= w.end - tolerance_s]
        first = min(reached) if reached else audio_s
        delays.append(max(0.0, min(first, matched.get(k, first)) - w.end))
    return delays


def gated_words(offline_words: Sequence[TimedWord], skipped: Sequence[tuple[float, float]],
                share: float = 0.5) -> list[TimedWord]:
    """Offline words of which at least ``share`` of the duration lies in ``skipped`` spans."""
    out = []
    for w in offline_words:
        length = max(w.end - w.start, 1e-3)
        inside = sum(max(0.0, min(w.end, b) - max(w.start, a)) for a, b in skipped)
        if inside / length >= share:
            out.append(w)
    return out


def lost_words(offline_words: Sequence[TimedWord], skipped: Sequence[tuple[float, float]],
               stream_words: Sequence[TimedWord] | None = None, language: str = "en", unit: str = "word",
               share: float = 0.5) -> list[TimedWord]:
    """The :func:`gated_words` the stream lost: with ``stream_words`` (the stream's committed
    words), only those none of whose units the stream has in their place (a minimum-edit
    alignment of the offline text's units to the stream's: a word the stream wrote, though the
    offline timing puts it in skipped audio, was not lost; one it misread there counts; one with
    no unit to score, a filler the normaliser drops, is not counted). Without ``stream_words``,
    every gated word."""
    gated = gated_words(offline_words, skipped, share)
    if stream_words is None or not gated:
        return gated
    ref, owner = normalized_words(offline_words, language, unit)
    hyp, _ = normalized_words(stream_words, language, unit)
    kept = {owner[i] for i, _ in align_words(ref, hyp)}
    lost = set(owner) - kept  # words with units, none of them in the stream's text
    gated_ids = {id(w) for w in gated}
    return [w for k, w in enumerate(offline_words) if k in lost and id(w) in gated_ids]


def agreement_error(offline_text: str, stream_text: str, language: str = "en") -> tuple[int, int]:
    """(word errors, offline words) of the stream's text against the offline text."""
    return error_counts(offline_text, stream_text, language)
