"""What a viewer waits for (``susurrus.evaluation.viewer``): each final word's first moment on
screen in its final form, and the churn of the interim guess."""

from __future__ import annotations

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.bench import stream_item
from susurrus.evaluation.reference import offline_reference
from susurrus.evaluation.viewer import Display, word_latencies
from susurrus.streaming.config import stream_config
from susurrus.streaming.events import Committed, Interim, StreamWord


def _w(word: str, end: float, at: float) -> StreamWord:
    return StreamWord(word, end - 0.3, end, at, 0.9)


def test_a_word_counts_from_its_first_showing_at_its_final_place_and_changes_are_churn():
    d = Display()
    d.watch([Interim(" and so my", 1.0)], 1.0)  # "my" shown at 1.0
    d.watch([Interim(" and so by fellow", 1.6)], 1.6)  # "my" -> "by": one change
    d.watch([Committed([_w(" And", 0.5, 2.0), _w(" so", 0.8, 2.0)]), Interim(" my fellow", 2.0)], 2.0)
    d.watch([Interim("", 2.6)], 2.6)  # the guess taken back: two words
    final = [_w(" And", 0.5, 2.0), _w(" so", 0.8, 2.0), _w(" my", 1.0, 3.2), _w(" fellow", 1.4, 3.2),
             _w(" -", 1.5, 3.2)]
    d.watch([Committed(final[2:])], 3.2)
    # "And" / "so" shown at 1.0 (case and punctuation aside); "my" first right at 1.0; "fellow" at 1.6
    assert d.first_shown(final) == [1.0, 1.0, 1.0, 1.6, None]
    assert d.churn == 2 + 2  # my -> by -> my, then the two words taken back


def test_on_speech_a_word_is_never_shown_later_than_it_is_committed(tiny):
    audio = decode_audio(susurrus.example_audio())
    display = Display()
    session, _ = stream_item(tiny.net, tiny.tokenizer, audio, stream_config("medium"), display=display)
    shown = display.first_shown(session.words)
    assert len(shown) == len(session.words) >= 20
    assert all(t is not None and t <= w.emitted_at + 1e-9 for t, w in zip(shown, session.words))
    assert sum(t < w.emitted_at for t, w in zip(shown, session.words)) >= len(shown) // 2  # the guess leads
    _, offline_words = offline_reference(tiny, audio, "en")
    committed, first = word_latencies(session.words, offline_words), word_latencies(session.words, offline_words,
                                                                                    shown)
    assert len(committed) == len(first) and sum(first) < sum(committed)
