"""What a viewer of the live text waits for: each word's latency, committed and as first shown.

A live caption shows the committed words and, after them, the interim guess (``Interim``, replaced
by the next one). A word a viewer can read in its final form may be on screen well before it is
committed: the guess had it right. :class:`Display` follows the screen as the stream's events
change it, word position by word position, and says when each final word was first shown at
its final position (:meth:`Display.first_shown`), and how often a word on screen was replaced by
another or taken back (:attr:`Display.churn`: a viewer sees the text change under their eyes).

Words are compared by their letters and digits, lower case (a guess "you" that is committed as
"You." is the same word shown); a committed word with neither (a lone dash) has no position.
Scripts written without spaces (zh, ja) are not followed: their guess has no word boundaries.

Latencies are in audio time, as the bench's committed latency (``emitted_at`` minus the word's
end in the offline word timestamps, matched by alignment: :func:`word_latencies`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from susurrus.evaluation.alignment import align_words, normalized_words
from susurrus.streaming.events import Committed, Event, Interim, StreamWord
from susurrus.types import Word

_LETTERS = re.compile(r"\w+")


def key(word: str) -> str:
    """A word as the viewer reads it: its letters and digits, lower case."""
    return "".join(_LETTERS.findall(word.lower())).replace("_", "")


@dataclass
class Display:
    """The screen of one stream: committed words, then the interim guess's words."""

    committed: list[str] = field(default_factory=list)  # the committed words' keys (non-empty)
    interim: list[str] = field(default_factory=list)  # the guess's
    shown: list[str] = field(default_factory=list)  # what is on screen now, position by position
    history: list[list[tuple[float, str]]] = field(default_factory=list)  # per position: (time, word) shown
    churn: int = 0  # words on screen replaced by another word or taken back

    def watch(self, events: Sequence[Event], at: float) -> None:
        """The screen after ``events`` (one call's), at audio time ``at``."""
        changed = False
        for ev in events:
            if isinstance(ev, Committed):
                self.committed += [k for w in ev.words if (k := key(w.word))]
                changed = True
            elif isinstance(ev, Interim):
                self.interim = [k for w in ev.text.split() if (k := key(w))]
                changed = True
        if changed:
            self._show(self.committed + self.interim, at)

    def _show(self, words: list[str], at: float) -> None:
        for i, (old, new) in enumerate(zip(self.shown, words)):
            if old != new:
                self.churn += 1
                self.history[i].append((at, new))
        self.churn += max(0, len(self.shown) - len(words))  # taken back
        for i in range(len(self.shown), len(words)):
            if i == len(self.history):
                self.history.append([])
            self.history[i].append((at, words[i]))
        self.shown = list(words)

    def first_shown(self, final: Sequence[StreamWord]) -> list[float | None]:
        """For each of the stream's final words, the audio time it was first on screen at its
        final position (None for a word without letters or digits)."""
        out: list[float | None] = []
        position = 0
        for w in final:
            k = key(w.word)
            if not k:
                out.append(None)
                continue
            seen = self.history[position] if position < len(self.history) else []
            out.append(next((t for t, shown in seen if shown == k), w.emitted_at))
            position += 1
        return out


def word_latencies(stream_words: Sequence[StreamWord], offline_words: list[Word],
                   times: Sequence[float | None] | None = None) -> list[float]:
    """``emitted_at`` (or ``times[i]`` for the stream's word i) minus the offline end time of the
    same word, for the words both agree on (one latency per stream word)."""
    hyp_tokens, hyp_owner = normalized_words(stream_words)
    ref_tokens, ref_owner = normalized_words(offline_words)
    out = []
    last = -1
    for r, h in align_words(ref_tokens, hyp_tokens):
        owner = hyp_owner[h]
        if owner == last:
            continue
        last = owner
        at = stream_words[owner].emitted_at if times is None else times[owner]
        if at is not None:
            out.append(at - offline_words[ref_owner[r]].end)
    return out
