"""``susurrus stream``: a file or raw PCM on stdin through the incremental engine, live.

Ctrl+C is how a live stream ends: the first one stops reading, finishes the stream (the words
still pending are committed) and writes the outputs; a second one aborts.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from susurrus.transports.cli_args import UsageError, check_input_file, check_model_options, check_output_dir


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
    from susurrus.streaming.session import stream_config
    from susurrus.streaming.vad import TurnConfig
    from susurrus.transports.pcm_input import declared_format

    # everything that can be checked is checked before the model loads and the audio is read
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
        check_input_file(args.input)
        audio = _decode(args.input)
        name = Path(args.input).stem

    from susurrus.speakers.options import tracker_from_args

    tracker = tracker_from_args(args)  # speaker options and clips checked before the model loads
    import susurrus

    model = susurrus.load_model(args.model, threads=args.threads, int8_output=args.int8_output,
                                compute_type=args.compute_type)
    check_model_options(model, args.language, args.task)
    stream = model.stream(args.latency, **settings)
    stream.speakers = tracker
    block = config.chunk_ms * 16
    with Interrupt() as interrupt:
        if audio is None:
            from susurrus.transports.pcm_input import read_pcm

            blocks: Iterator[Any] = read_pcm(InterruptibleReader(sys.stdin.buffer, interrupt), fmt, block,
                                             explicit=explicit)
        else:
            blocks = (audio[i:i + block] for i in range(0, len(audio), block))
        status = _run(args, stream, blocks, interrupt)
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


def _run(args: argparse.Namespace, stream: Any, blocks: Iterator[Any], interrupt: Interrupt) -> int:
    import numpy as np

    from susurrus.streaming.session import Committed, Interim, LanguageDetected, TurnEnded
    from susurrus.transports.display import LiveDisplay

    display = LiveDisplay(sys.stdout, not args.quiet, args.turns or args.semantic_turns)
    started = time.perf_counter()
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
        if args.realtime:  # pace the input at speaking speed
            ahead = stream.audio_time - (time.perf_counter() - started)
            if ahead > 0:
                time.sleep(ahead)
        show(stream.feed(np.asarray(piece, dtype=np.float32)))
    interim = ""
    show(stream.finish())
    display.close()
    return 0


def _write(fmt: str, stream: Any, target: Path) -> None:
    from susurrus.streaming.output import write_stream_result
    from susurrus.transports.cli_args import save_or_print

    save_or_print(lambda path: write_stream_result(fmt, stream.words, stream.audio_time, path), target,
                  lambda: stream.text.strip() + "\n")
