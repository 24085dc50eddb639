"""A live stream that falls behind its audio says so: a warning on stderr when the text is 2 s
behind the audio clock (again only when the lag doubles, not at every step), the lag in the live
display, and a last line with the worst lag. Real audio through the real engine; the clock is a
slowed one, ticking 1 s per 0.64 s block as a machine slower than real time would."""

from __future__ import annotations

import argparse
import io
import itertools

import pytest

from susurrus.audio.io import decode_audio
from susurrus.cli.display import LiveDisplay
from susurrus.cli.stream import Interrupt, LagWatch, _run

JFK = "jfk_inaugural"


def _stream(tiny, audio, seconds_per_look: float) -> None:
    args = argparse.Namespace(quiet=True, turns=False, semantic_turns=False, input="-", realtime=False)
    ticks = itertools.count()
    block = 640 * 16
    with Interrupt() as interrupt:
        assert _run(args, tiny.stream("medium"), (audio[i:i + block] for i in range(0, len(audio), block)),
                    interrupt, clock=lambda: next(ticks) * seconds_per_look) == 0


@pytest.mark.slow
def test_a_live_stream_that_falls_behind_warns_once_per_doubling(capsys, tiny, dev_item):
    audio = decode_audio(dev_item(JFK).audio)
    _stream(tiny, audio, 1.0)  # 1 s of clock per 0.64 s block: 0.36 s more behind at every block
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("susurrus stream: warning: the text is")]
    assert len(warnings) == 2, err  # at 2 s and at twice that, not at each of the 17 blocks
    assert "2.1 s behind the audio" in warnings[0] and "4.2 s behind" in warnings[1]
    assert err[-1] == "susurrus stream: the text fell up to 7.6 s behind the audio"
    _stream(tiny, audio, 0.5)  # faster than real time: nothing to say
    assert "behind" not in capsys.readouterr().err


def test_the_live_display_shows_the_lag():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    display = LiveDisplay(out, True, width=80)
    display.behind = 3.25
    display.update("And so my fellow Americans", " ask")
    assert "[3.2 s behind]" in out.getvalue()
    watch = LagWatch(clock=iter([0.0, 3.0, 3.5, 8.0]).__next__)
    watch.start(0.64, paced=False)
    assert watch.step(1.0) is not None and watch.step(3.0) is None  # 2.64 s, then 1.14 s: same episode
    assert watch.step(1.0) is not None  # 7.64 s: more than doubled
