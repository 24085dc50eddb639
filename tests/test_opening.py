"""A window's lost opening words (streaming/opening.py): the rule alone, then on real speech."""

from __future__ import annotations

import pytest

from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import read_manifest
from susurrus.streaming.opening import in_front
from tests.conftest import need_data

# token ids stand for pieces: a piece starting with a space starts a word
PIECES = {1: " Die", 2: " Urs", 3: "ache", 8: ",", 9: " 3"}


def starts_word(token: int) -> bool:
    return PIECES[token].startswith(" ")


@pytest.mark.parametrize(("tokens", "frames", "taken", "why"), [
    ([1, 2, 3], [5, 20, 30], True, "two words read before the opening (frame 50)"),
    ([9], [10], True, "a number is a word"),
    ([1, 2, 3], [5, 20, 50], True, "read up to the opening's frame"),
    ([1, 2, 3], [5, 90, 30], False, "one read after the opening: not in front of it"),
    ([8], [5], False, "punctuation alone"),
    ([3, 1], [5, 10], False, "begins inside a word"),
    ([], [], False, "nothing in front"),
])
def test_what_counts_as_words_in_front_of_an_opening(tokens, frames, taken, why):
    text = "".join(PIECES[t] for t in tokens)
    assert in_front(tokens, frames, 50, text, starts_word) is taken, why


def test_a_streams_lost_opening_words_come_back_on_real_speech(base):
    """base, German, language given: offline Whisper reads "Die Ursache für den Ausfall"; the
    stream's window first committed "für den Ausfall" (the opening words decoded at 1.3 s, gone
    from 2 s on). Read again in both directions, the opening has words in front of it."""
    items = {i.id: i for i in read_manifest(need_data("multi"))}
    item = items.get("thorsten_d2211c12c486")
    if item is None:
        pytest.skip("multi item thorsten_d2211c12c486 not in the manifest")
    audio = decode_audio(item.audio)

    def first_words(check: bool) -> list[str]:
        stream = base.stream(language="de", opening_check=check)
        for i in range(0, len(audio), 1600):
            stream.feed(audio[i:i + 1600])
        stream.finish()
        return [w.word.strip(" ,.").lower() for w in stream.words]

    without, with_check = first_words(False), first_words(True)
    assert without.index("für") == 0, without  # the stream alone lost what came before "für"
    assert with_check.index("für") >= 1 and with_check[with_check.index("für"):][:3] == without[:3], with_check
