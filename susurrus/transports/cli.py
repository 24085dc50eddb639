"""Command line: ``susurrus transcribe`` (files), later ``stream``, ``bench`` and ``serve``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from susurrus.transports.writers import WRITERS, format_timestamp, write_result

MODEL_HELP = ("model: an embedded name (tiny.en, base), a CTranslate2 directory, a Hugging Face "
              "checkpoint directory or cached repo id (openai/whisper-small), or an OpenAI .pt file; "
              "nothing is downloaded (default: %(default)s)")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny.en", help=MODEL_HELP)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for inference (default: PyTorch's choice)")


def _cmd_transcribe(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import susurrus

    model = susurrus.load_model(args.model, threads=args.threads)
    formats = sorted(WRITERS) if args.output_format == "all" else [args.output_format]
    out_dir = Path(args.output_dir)
    status = 0
    for path in args.files:
        try:
            segments, info = model.transcribe(
                path, language=args.language, task=args.task, beam_size=args.beam_size,
                word_timestamps=args.word_timestamps, without_timestamps=args.without_timestamps,
                temperature=args.temperature if args.temperature is not None else
                (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), initial_prompt=args.initial_prompt,
                condition_on_previous_text=not args.no_condition_on_previous_text)
        except (OSError, ValueError) as err:
            print(f"susurrus: {path}: {err}", file=sys.stderr)
            status = 1
            continue
        if model.is_multilingual and args.language is None:
            print(f"{path}: detected language {info.language} "
                  f"(p={info.language_probability:.2f})", file=sys.stderr)
        collected = []
        bar = tqdm(total=round(info.duration, 2), unit="s", desc=Path(path).name, file=sys.stderr,
                   disable=args.quiet or not sys.stderr.isatty() and not args.progress,
                   bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s audio [{elapsed}<{remaining}]")
        for segment in segments:
            collected.append(segment)
            bar.update(round(min(segment.end, info.duration) - bar.n, 2))
            if not args.quiet:
                line = (f"[{format_timestamp(segment.start)} --> {format_timestamp(segment.end)}] "
                        f"{segment.text.strip()}")
                tqdm.write(line, file=sys.stdout)
        bar.update(round(info.duration - bar.n, 2))
        bar.close()
        for fmt in formats:
            target = out_dir / f"{Path(path).stem}.{fmt}"
            write_result(fmt, collected, info, target)
            print(f"wrote {target}", file=sys.stderr)
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="susurrus",
        description="Live speech-to-text with Whisper. Every command runs offline on local weights.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("transcribe", help="transcribe audio files (WAV, FLAC, OGG, MP3, ...)",
                       description="Transcribe whole files in 30 s windows, printing segments as "
                                   "they are decoded and writing txt/srt/vtt/json files.")
    t.add_argument("files", nargs="+", metavar="FILE", help="audio files to transcribe")
    _add_model_args(t)
    t.add_argument("--language", default=None,
                   help="language code (en, es, ...); default: detect (multilingual models)")
    t.add_argument("--task", choices=["transcribe", "translate"], default="transcribe",
                   help="translate: English text from any language (multilingual models)")
    t.add_argument("--beam-size", type=int, default=5, help="beams; 1 = greedy (default: 5)")
    t.add_argument("--temperature", type=float, default=None,
                   help="a single decoding temperature, disabling the fallback ladder "
                        "0.0,0.2,...,1.0 used by default")
    t.add_argument("--word-timestamps", action="store_true",
                   help="word start/end times from cross-attention alignment (json, and srt/vtt "
                        "segment bounds)")
    t.add_argument("--without-timestamps", action="store_true",
                   help="decode without timestamp tokens (text only; windows advance by 30 s)")
    t.add_argument("--initial-prompt", default=None, help="text to condition the first window on")
    t.add_argument("--no-condition-on-previous-text", action="store_true",
                   help="do not feed each window's text to the next as a prompt")
    t.add_argument("--output-format", "-f", choices=[*sorted(WRITERS), "all"], default="txt",
                   help="file format to write (default: %(default)s)")
    t.add_argument("--output-dir", "-o", default=".", help="where to write (default: current dir)")
    t.add_argument("--quiet", action="store_true", help="print no segments or progress")
    t.add_argument("--progress", action="store_true", help="show the progress bar even when "
                                                           "stderr is not a terminal")
    t.set_defaults(func=_cmd_transcribe)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except FileNotFoundError as err:
        print(f"susurrus: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
