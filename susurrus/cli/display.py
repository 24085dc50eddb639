"""The live terminal display shared by `susurrus stream` and `susurrus client`."""

from __future__ import annotations

import shutil
from typing import TextIO


class LiveDisplay:
    """Committed text scrolls like a transcript: each full terminal line of it is written once,
    for good (wrapped at a space), and only the last, unfinished line is rewritten, with the
    interim guess dimmed after it. Off a terminal, committed words are printed as they come.

    ``turns``: one line per speech turn, with its span (off a terminal: only those lines)."""

    DIM, RESET, LAG = "\x1b[2m", "\x1b[0m", "\x1b[33m"  # LAG: yellow

    def __init__(self, stream: TextIO, enabled: bool, turns: bool = False, width: int | None = None):
        self.out = stream
        self.enabled = enabled
        self.turns = turns
        self.tty = stream.isatty()
        self.width = width  # columns; None: the terminal's, looked up at each update
        self.line = ""  # committed text on the current (unfinished) terminal line
        self.behind = 0.0  # seconds the text is behind a live source's audio; shown when not 0

    def _columns(self) -> int:
        return max(20, (self.width or shutil.get_terminal_size((100, 20)).columns) - 1)

    def update(self, committed: str, interim: str) -> None:
        if not self.enabled:
            return
        if not self.tty:
            if committed and not self.turns:
                self.out.write(committed)
                self.out.flush()
            return
        width = self._columns()
        self.line += committed
        if self.turns:  # a preview of the open turn, whose own line comes when it ends
            shown = (self.line + interim)[-width:]
            plain = max(0, len(shown) - len(interim))
            self.out.write("\r\x1b[K" + shown[:plain] + self.DIM + shown[plain:] + self.RESET)
            self.out.flush()
            return
        while len(self.line) > width:  # a full line: written for good, the rest goes on below
            cut = self.line.rfind(" ", 1, width + 1)
            cut = cut if cut > 0 else width
            self.out.write("\r\x1b[K" + self.line[:cut].rstrip() + "\n")
            self.line = self.line[cut:].lstrip(" ")
        lag = f" [{self.behind:.1f} s behind]" if self.behind else ""
        room = width - len(self.line) - len(lag)
        tail = interim if len(interim) <= room else interim[:room - 1] + "…" if room > 1 else ""
        self.out.write("\r\x1b[K" + self.line + (self.DIM + tail + self.RESET if tail else "")
                       + (self.LAG + lag + self.RESET if lag else ""))
        self.out.flush()

    def turn(self, text: str, start_ms: int, end_ms: int) -> None:
        """A speech turn ended: its own line, with its audio span (nothing for a turn without words)."""
        if not self.enabled:
            return
        if self.tty:
            self.out.write("\r\x1b[K")
        if text.strip():
            self.out.write(f"[{start_ms / 1000:7.2f} -> {end_ms / 1000:7.2f}] {text.strip()}\n")
        self.out.flush()
        self.line = ""

    def end_line(self) -> None:
        """The current line is done (an item or turn ended): the next text starts a new one."""
        if self.enabled:
            if self.tty:  # the committed text without the interim guess, which is void now
                self.out.write("\r\x1b[K" + self.line)
            self.out.write("\n")
            self.out.flush()
        self.line = ""

    close = end_line
