"""Energy-based refinement of attention word times at pauses (pure function over a speech mask)."""

from __future__ import annotations

import numpy as np

from susurrus.decoding.alignment import WordTiming, refine_with_energy


def _mask(spans: list[tuple[float, float]], seconds: float = 5.0) -> np.ndarray:
    m = np.zeros(int(seconds * 100), dtype=bool)
    for a, b in spans:
        m[int(a * 100):int(b * 100)] = True
    return m


def _w(word: str, start: float, end: float) -> WordTiming:
    return WordTiming(word, [0], start, end, 0.9)


def test_pause_absorbed_at_word_start_is_trimmed():
    speech = _mask([(0.0, 1.0), (1.6, 2.2)])
    words = [_w(" one", 0.2, 1.0), _w(" two", 1.0, 2.2)]
    refine_with_energy(words, speech)
    assert abs(words[1].start - 1.6) <= 0.03 and words[1].end == 2.2
    assert words[0].start <= 0.2  # untouched or extended to the speech onset, never later


def test_word_placed_in_silence_moves_onto_unclaimed_speech():
    speech = _mask([(0.0, 1.0), (1.5, 1.9), (2.6, 3.2)])
    words = [_w(" one", 0.0, 1.0), _w(" now", 2.1, 2.1), _w(" as", 2.6, 3.2)]
    refine_with_energy(words, speech)
    assert abs(words[1].start - 1.5) < 0.02 and abs(words[1].end - 1.9) < 0.02


def test_late_start_after_pause_extends_to_speech_onset_but_not_into_a_neighbour():
    speech = _mask([(0.0, 1.0), (1.5, 3.0)])
    words = [_w(" one", 0.0, 1.0), _w(" two", 1.8, 2.4), _w(" three", 2.4, 3.0)]
    refine_with_energy(words, speech)
    assert abs(words[1].start - 1.5) < 0.02
    assert words[2].start == 2.4  # inside continuous speech, the neighbour owns the frames


def test_continuous_speech_is_left_alone():
    speech = np.ones(500, dtype=bool)
    words = [_w(" a", 0.1, 0.5), _w(" b", 0.5, 0.9)]
    refine_with_energy(words, speech)
    assert [(w.start, w.end) for w in words] == [(0.1, 0.5), (0.5, 0.9)]


def test_no_word_moves_onto_speech_that_earlier_words_claimed():
    # a stream's step times only its new words: the speech before the last committed word's end
    # (1.9 s) is that word's, however silent the new word's own span
    speech = _mask([(0.0, 1.0), (1.5, 1.9), (2.6, 3.2)])
    words = [_w(" now", 2.1, 2.3), _w(" as", 2.6, 3.2)]
    refine_with_energy(words, speech)
    assert abs(words[0].start - 1.5) < 0.02  # unclaimed, the speech before it is taken
    words = [_w(" now", 2.1, 2.3), _w(" as", 2.6, 3.2)]
    refine_with_energy(words, speech, claimed=1.9)
    assert words[0].start >= 1.9 and words[0].end >= 2.1
