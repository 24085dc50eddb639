"""The bench's measures of a text's edges (susurrus/evaluation/edges.py): its opening words and
its last word against offline's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from susurrus.evaluation.edges import last_word_kept, opening_errors, row


@pytest.mark.parametrize(("offline", "stream", "errors", "units"), [
    ("What I know is that", "Stay with what I know is that", 2, 3),  # two words inserted in front
    ("Ask not!", "S not.", 1, 2),  # the first word heard otherwise; punctuation is no word
    ("His enemy went down", "He suddenly went down", 2, 3),
    ("one two three four five", "one two three four six", 0, 3),  # an error after the opening
    ("one two three four", "one three four", 1, 3),  # the second word missing
    ("one two three four", "one two three extra four", 0, 3),  # inserted after the third word
    ("one two three four", "one two extra three four", 1, 3),  # ... before it
    ("", "anything", 0, 0),
])
def test_opening_errors_count_what_touches_offlines_first_words(offline, stream, errors, units):
    assert opening_errors(offline, stream) == (errors, units)


def _item(reference, offline, stream, shifted=None):
    return SimpleNamespace(language="en", reference=reference, offline_text=offline, stream_text=stream,
                           shifted_text=shifted)


def test_the_last_word_counts_where_offline_has_it_right():
    assert last_word_kept(_item("this is all very whispered", "This is all very whispered.", "all very whisper")) \
        is False
    assert last_word_kept(_item("this is all very whispered", "This is all very whispered.", "very whispered")) is True
    assert last_word_kept(_item("this is all very whispered", "This is all very whisper.", "very whispered")) is None
    assert last_word_kept(_item(None, "a", "a")) is None


def test_a_row_pools_the_opening_and_counts_the_last_words():
    items = [_item("ask not what", "Ask not what", "S not what", shifted="Ask not what"),
             _item("we are out of food", "We're out of food.", "We're out of food.", shifted="Yeah, out of food.")]
    # against the reference: the stream's "S" for "ask" (1 of 6 opening words), offline none
    assert row("x", items) == "| x | 2 | 16.67 (1) | 33.33 (1) | 16.67 / 0.00 | 2/2 (100.0 %) | 2/2 (100.0 %) |"
    # a learner's item (hard/): the stream's opening is not offline's but is nearly the
    # reference's ("Sunday" for "sandy"), where offline's misses all three words and inserts two
    # more before the third (5 errors over 3 words)
    learner = _item("sandy is good at rock climbing", "Send the year school dad's rock climbing.",
                    "Sunday is good at rock climbing.")
    assert row("y", [learner]) == "| y | 1 | 100.00 (1) | - | 33.33 / 166.67 | 1/1 (100.0 %) | - |"
    # offline 10 ms later with another last word: the noise floor of the last-word measure
    moved = _item("this is all very whispered", "This is all very whispered.", "very whispered",
                  shifted="This is all very whisper.")
    assert row("z", [moved]).endswith("| 1/1 (100.0 %) | 0/1 (0.0 %) |")
