"""``susurrus transcribe``: whole files offline, each window decoded as the progress bar moves
(the options are ``decoding/offline.py``'s, shared with the REST API)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from susurrus.writers import WRITERS, format_timestamp, write_result


def cmd_transcribe(args: argparse.Namespace) -> int:
    from susurrus.cli.args import check_input_file, check_model_options, check_output_dir, save_or_print
    from susurrus.cli.outputs import output_names, target
    from susurrus.decoding.offline import transcribe_options

    out_dir = check_output_dir(args.output_dir)  # before the work, not after it
    for path in args.files:
        check_input_file(path)
    names = output_names(args.files)  # distinct: same-named inputs never overwrite each other
    formats = sorted(WRITERS) if args.output_format == "all" else [args.output_format]

    from tqdm import tqdm

    import susurrus

    model = susurrus.load_model(args.model, threads=args.threads, int8_output=args.int8_output,
                                compute_type=args.compute_type, device=args.device)
    check_model_options(model, args.language, args.task)
    status = 0
    options = transcribe_options(  # the REST API runs the same options (decoding/offline.py)
        language=args.language, task=args.task, beam_size=args.beam_size, temperature=args.temperature,
        word_timestamps=args.word_timestamps, without_timestamps=args.without_timestamps,
        initial_prompt=args.initial_prompt, condition_on_previous_text=not args.no_condition_on_previous_text,
        vad=not args.no_vad)
    from susurrus.cli.speakers import tracker_from_args, wants_speakers

    diarize = wants_speakers(args)
    if diarize:
        options["word_timestamps"] = True  # a label per word
        tracker_from_args(args)  # the options and clips checked before any file
    for path in names:
        interrupted = False
        try:
            segments, info = model.transcribe(path, **options)
        except (OSError, ValueError) as err:  # as a bad input found before the model: exit 2
            print(f"susurrus transcribe: error: {err if path in str(err) else f'{path}: {err}'}", file=sys.stderr)
            status = 2
            continue
        except KeyboardInterrupt:
            print(f"\nsusurrus transcribe: interrupted while reading {path}; nothing of it was decoded, "
                  "nothing written", file=sys.stderr)
            return 130
        if len(args.files) > 1 and not args.quiet:
            print(f"==> {path} <==", flush=True)
        if model.is_multilingual and args.language is None:
            print(f"{path}: detected language {info.language} "
                  f"(p={info.language_probability:.2f})", file=sys.stderr)
        collected = []
        bar = tqdm(total=round(info.duration, 2), unit="s", desc=Path(path).name, file=sys.stderr,
                   disable=args.quiet or not sys.stderr.isatty() and not args.progress,
                   bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s audio [{elapsed}<{remaining}]")
        try:
            for segment in segments:  # Ctrl+C stops the decoding; a segment is kept and printed whole
                with _held_interrupt():
                    collected.append(segment)
                    bar.update(round(min(segment.end, info.duration) - bar.n, 2))
                    if not args.quiet and not diarize:
                        tqdm.write(f"[{format_timestamp(segment.start)} --> {format_timestamp(segment.end)}] "
                                   f"{segment.text.strip()}", file=sys.stdout)
        except KeyboardInterrupt:  # Ctrl+C: what was decoded is written, and where it stops said
            interrupted = True
        else:
            bar.update(round(info.duration - bar.n, 2))
        bar.close()
        if diarize:  # the whole file's speakers, then the lines
            from susurrus.audio.io import decode_audio
            from susurrus.speakers.offline import diarize_segments

            collected = diarize_segments(decode_audio(path), collected, tracker_from_args(args, keep_all=True))
            for segment in collected if not args.quiet else []:
                print(f"[{format_timestamp(segment.start)} --> {format_timestamp(segment.end)}] "
                      f"[{segment.speaker}] {segment.text.strip()}", flush=True)
        text = "".join(segment.text.strip() + "\n" for segment in collected)
        for fmt in formats:
            write = functools.partial(write_result, fmt, collected, info)
            written = target(out_dir, names[path], fmt)
            if not save_or_print(write, written, functools.partial(str, text)):
                status = 1
        if interrupted:
            reached = collected[-1].end if collected else 0.0
            rest = "; the files after it were not transcribed" if path != list(names)[-1] else ""
            print(f"susurrus transcribe: interrupted at {format_timestamp(reached)} of {path} "
                  f"({format_timestamp(info.duration)} long): the {len(collected)} segment(s) decoded so far are in "
                  f"{', '.join(str(target(out_dir, names[path], fmt)) for fmt in formats)}{rest}", file=sys.stderr)
            return 130
    return status


@contextlib.contextmanager
def _held_interrupt() -> Iterator[None]:
    """Hold a Ctrl+C that comes inside the block until its end, so that a segment is kept and
    its line printed together (the files then hold exactly the segments printed)."""
    if threading.current_thread() is not threading.main_thread():  # (signals are the main thread's)
        yield
        return
    held: list[object] = []
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt
