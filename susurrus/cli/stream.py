"""``susurrus stream``: a file or raw PCM on stdin through the incremental engine, live.

Ctrl+C is how a live stream ends: the first one stops reading, finishes the stream (the words
still pending are committed) and writes the outputs; a second one aborts.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from susurrus.cli.args import UsageError, check_input_file, check_model_options, check_output_dir


class _StopReading(Exception):
    """Raised by the Ctrl+C handler inside a blocking read of standard input."""


class Interrupt:
    """The first SIGINT asks the stream to end (a blocking stdin read returns at once); the second
    raises KeyboardInterrupt as usual."""

    def __init__(self) -> None:
        self.requested = False
        self.reading = False
        self._previous: Any = None

    def __enter__(self) -> Interrupt:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nsusurrus stream: finishing (Ctrl+C again to abort)", file=sys.stderr)
        if self.reading:
            raise _StopReading


class InterruptibleReader:
    """Standard input whose ``read`` returns end-of-file once Ctrl+C was pressed."""

    def __init__(self, raw: BinaryIO, interrupt: Interrupt):
        self.raw, self.interrupt = raw, interrupt

    def read(self, n: int) -> bytes:
        if self.interrupt.requested:
            return b""
        self.interrupt.reading = True
        try:
            return self.raw.read(n)
        except _StopReading:
            return b""
        finally:
            self.interrupt.reading = False


def cmd_stream(args: argparse.Namespace) -> int:
    # everything that can be checked is checked before PyTorch, the model and the audio
    if args.input != "-":
        check_input_file(args.input)
    from susurrus.cli.pcm_input import declared_format
    from susurrus.streaming.config import stream_config
    from susurrus.streaming.vad import TurnConfig

    turns = TurnConfig(silence_duration_ms=args.silence_ms) if args.turns or args.semantic_turns else None
    settings = dict(chunk_ms=args.chunk_ms, lookahead_ms=args.lookahead_ms, commit_margin_ms=args.commit_margin_ms,
                    silence_context_ms=args.silence_context_ms, prompt=args.prompt,
                    policy=args.policy, first_commit_ms=args.first_commit_ms, language=args.language,
                    task=args.task, vad=not args.no_vad, turns=turns, semantic_turns=args.semantic_turns)
    try:
        config = stream_config(args.latency, **settings)
    except ValueError as err:
        raise UsageError(str(err)) from None
    out_dir = check_output_dir(args.output_dir) if args.output_format else None
    if args.input == "-":
        fmt = declared_format(args.pcm_format, args.rate, args.channels)
        explicit = (args.pcm_format, args.rate, args.channels) != ("s16le", 16000, 1)
        audio = None
        name = "stdin"
    else:
        if (args.rate, args.channels) != (16000, 1):
            raise UsageError("--rate and --channels describe raw PCM on stdin ('-'); a file says its own format")
        audio = _decode(args.input)
        name = Path(args.input).stem

    from susurrus.cli.speakers import tracker_from_args

    tracker = tracker_from_args(args)  # speaker options and clips checked before the model loads
    import susurrus

    model = susurrus.load_model(args.model, threads=args.threads, int8_output=args.int8_output,
                                compute_type=args.compute_type, device=args.device)
    check_model_options(model, args.language, args.task)
    stream = model.stream(args.latency, speaker_tracker=tracker, **settings)
    block = config.chunk_ms * 16
    with Interrupt() as interrupt:
        if audio is None:
            from susurrus.cli.pcm_input import read_pcm

            blocks: Iterator[Any] = read_pcm(InterruptibleReader(sys.stdin.buffer, interrupt), fmt, block,
                                             explicit=explicit)
        else:
            blocks = (audio[i:i + block] for i in range(0, len(audio), block))
        from susurrus.cli.pcm_input import InputError

        try:
            status = _run(args, stream, blocks, interrupt, live=args.realtime or audio is None and _live_stdin())
        except InputError as err:  # standard input nothing here decodes: said before any text
            raise UsageError(str(err)) from None
        if interrupt.requested and audio is not None:
            status = 130  # a file cut short: the output holds what was heard
        if args.output_format:
            _write(args.output_format, stream, out_dir / f"{name}.{args.output_format}")
    return status


def _decode(path: str) -> Any:
    from susurrus.audio.io import decode_audio

    try:
        audio = decode_audio(path)
    except (OSError, ValueError) as err:
        raise UsageError(str(err) if path in str(err) else f"{path}: {err}") from None
    if not len(audio):
        raise UsageError(f"{path}: the file holds no audio")
    return audio


class LagWatch:
    """How far a live stream's text is behind its audio clock (the audio a live source has
    delivered by now), so that a captioner sees when the machine cannot keep up. The clock starts
    with the first block (which took its own length to record, or for ``--realtime`` to play);
    after each step the lag is the clock minus the audio transcribed. A warning goes to stderr
    when the lag reaches ``WARN_S``, and again only if it doubles; once it is back under
    ``CLEAR_S`` the episode is over and the next one warns again."""

    WARN_S = 2.0
    CLEAR_S = 1.0

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.origin: float | None = None  # the clock's time at audio time 0
        self.lag = 0.0
        self.worst = 0.0
        self.warned = 0.0  # the lag last warned about in this episode (0: none yet)

    def start(self, first_block_s: float, paced: bool) -> None:
        self.origin = self.clock() - (0.0 if paced else first_block_s)

    def now(self) -> float:
        """The audio clock: seconds of audio the source has delivered by now."""
        return self.clock() - self.origin if self.origin is not None else 0.0

    def step(self, transcribed_s: float) -> str | None:
        """After a step: the warning to print, if this lag calls for one."""
        self.lag = max(0.0, self.now() - transcribed_s)
        self.worst = max(self.worst, self.lag)
        if self.lag < self.CLEAR_S:
            self.warned = 0.0
        elif self.lag >= max(self.WARN_S, 2 * self.warned):
            self.warned = self.lag
            return (f"the text is {self.lag:.1f} s behind the audio: this machine transcribes this stream slower "
                    "than real time (a busy CPU? try --latency high, more --threads or a smaller model)")
        return None


def _live_stdin() -> bool:
    """Whether standard input may be a live source (a pipe, a terminal, a socket): not a file
    redirected into it (``< recording.raw``), which is all there at once."""
    import os
    import stat

    try:
        return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no file descriptor: not a source that runs live
        return False


def _run(args: argparse.Namespace, stream: Any, blocks: Iterator[Any], interrupt: Interrupt,
         clock: Callable[[], float] = time.perf_counter, live: bool | None = None) -> int:
    import numpy as np

    from susurrus.cli.display import LiveDisplay
    from susurrus.streaming.session import Committed, Interim, LanguageDetected, TurnEnded

    display = LiveDisplay(sys.stdout, not args.quiet, args.turns or args.semantic_turns)
    if live is None:  # a live source: its audio clock runs as we transcribe
        live = args.input == "-" or args.realtime
    watch = LagWatch(clock)
    interim = ""
    speaker: list[str | None] = [None]  # the last speaker shown (diarize)

    def show(events: list[Any]) -> None:
        nonlocal interim
        committed = ""
        for event in events:
            if isinstance(event, Committed):
                if event.speaker and event.speaker != speaker[0]:  # a new speaker: a new line
                    display.update(committed, "")
                    committed = f"[{event.speaker}]"
                    if speaker[0] is not None or display.line:
                        display.end_line()
                    speaker[0] = event.speaker
                committed += event.text
            elif isinstance(event, Interim):
                interim = event.text
            elif isinstance(event, TurnEnded):
                display.update(committed, "")
                committed, interim = "", ""
                display.turn(event.text, event.audio_start_ms, event.audio_end_ms)
            elif isinstance(event, LanguageDetected):
                print(f"language: {event.language} (p={event.probability:.2f})", file=sys.stderr)
        display.update(committed, interim)

    for piece in blocks:
        if interrupt.requested:
            break
        if watch.origin is None:
            watch.start(len(piece) / 16000, paced=args.realtime)
        if args.realtime:  # pace the input at speaking speed
            ahead = stream.audio_time - watch.now()
            if ahead > 0:
                time.sleep(ahead)
        events = stream.feed(np.asarray(piece, dtype=np.float32))
        if live:
            warning = watch.step(stream.audio_time)
            display.behind = watch.lag if watch.lag >= watch.WARN_S else 0.0
            if warning:  # on a terminal, below the live line (which the next update redraws)
                print(f"{chr(10) if display.enabled and display.tty else ''}susurrus stream: warning: {warning}",
                      file=sys.stderr)
        show(events)
    interim = ""
    display.behind = 0.0
    show(stream.finish())
    display.close()
    if live and watch.worst >= watch.WARN_S:
        print(f"susurrus stream: the text fell up to {watch.worst:.1f} s behind the audio", file=sys.stderr)
    return 0


def _write(fmt: str, stream: Any, target: Path) -> None:
    from susurrus.cli.args import save_or_print
    from susurrus.streaming.output import write_stream_result

    save_or_print(lambda path: write_stream_result(fmt, stream.words, stream.audio_time, path), target,
                  lambda: stream.text.strip() + "\n")
