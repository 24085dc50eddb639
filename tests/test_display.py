"""The live terminal display: committed text scrolls like a transcript, only the interim tail is
rewritten. The terminal is emulated: ``\\r`` returns to the line's start, ``ESC[K`` clears it."""

from __future__ import annotations

import io
import re

from susurrus.cli.display import LiveDisplay

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        """The lines as a terminal leaves them: each line's text after its last carriage return."""
        return [ANSI.sub("", line.split("\r")[-1]) for line in self.getvalue().split("\n")]


WORDS = ("And so my fellow Americans, ask not what your country can do for you; ask what you can do "
         "for your country. My fellow citizens of the world, ask not what America will do for you, but "
         "what together we can do for the freedom of man.").split()


def test_committed_text_stays_on_screen_and_only_the_interim_is_rewritten():
    term = Terminal()
    display = LiveDisplay(term, True, width=41)
    for i, word in enumerate(WORDS):
        display.update(" " + word if i else word, " " + " ".join(WORDS[i + 1:i + 4]))  # a guess of the next words
        lines = term.screen()
        assert all(len(line) <= 40 for line in lines)
        assert " ".join(" ".join(lines).split()).startswith(" ".join(WORDS[:i + 1]))
    display.close()
    lines = term.screen()
    assert " ".join(" ".join(lines).split()) == " ".join(WORDS)  # every committed word, once, in order
    assert len([line for line in lines if line]) >= 5  # it scrolled: many lines, not one rewritten line
    assert "\x1b[2m" in term.getvalue()  # the interim guess was shown dimmed


def test_off_a_terminal_committed_words_are_printed_as_they_come():
    out = io.StringIO()
    display = LiveDisplay(out, True)
    for i, word in enumerate(WORDS[:5]):
        display.update(" " + word if i else word, " guess")
    display.close()
    assert out.getvalue() == " ".join(WORDS[:5]) + "\n"


def test_turn_lines_carry_their_span_and_empty_turns_are_not_printed():
    term = Terminal()
    display = LiveDisplay(term, True, turns=True, width=60)
    display.update(" And so my", " fellow")
    display.turn("And so my fellow Americans.", 50, 2270)
    display.turn("", 3000, 3840)
    display.turn("Ask what you can do.", 7890, 10560)
    display.close()
    assert [line for line in term.screen() if line] == ["[   0.05 ->    2.27] And so my fellow Americans.",
                                                        "[   7.89 ->   10.56] Ask what you can do."]
