"""The live terminal display shared by `susurrus stream` and `susurrus client`."""

from __future__ import annotations

import shutil


class LiveDisplay:
    """Committed text plain, interim text dimmed, on one rewritten terminal line (or, when
    the output is not a terminal, committed words printed as they come)."""

    DIM, RESET = "\x1b[2m", "\x1b[0m"

    def __init__(self, stream, enabled: bool, turns: bool = False):
        self.out = stream
        self.enabled = enabled
        self.turns = turns  # one line per speech turn (off a terminal: only those lines)
        self.tty = stream.isatty()
        self.line = ""

    def update(self, committed: str, interim: str) -> None:
        if not self.enabled:
            return
        if not self.tty:
            if committed and not self.turns:
                self.out.write(committed)
                self.out.flush()
            return
        self.line += committed
        width = shutil.get_terminal_size((100, 20)).columns - 1
        shown = (self.line + interim)[-width:]
        plain = max(0, len(shown) - len(interim))
        self.out.write("\r\x1b[K" + shown[:plain] + self.DIM + shown[plain:] + self.RESET)
        self.out.flush()

    def turn(self, text: str, start_ms: int, end_ms: int) -> None:
        """A speech turn ended: its own line, with its audio span."""
        if not self.enabled:
            return
        span = f"[{start_ms / 1000:7.2f} -> {end_ms / 1000:7.2f}]"
        self.out.write(("\r\x1b[K" if self.tty else "") + f"{span} {text}\n")
        self.out.flush()
        self.line = ""

    def end_line(self) -> None:
        """The current line is done (an item or turn ended): the next text starts a new one."""
        if self.enabled:
            self.out.write("\n")
            self.out.flush()
        self.line = ""

    close = end_line
