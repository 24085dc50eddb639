"""The command line's speaker options (speakers/ used from above) (``transcribe``, ``stream``, ``serve``'s defaults)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from susurrus.cli.args import UsageError

if TYPE_CHECKING:
    from susurrus.speakers.tracker import SpeakerTracker


def _count(v: str) -> int:
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a speaker count is at least 1, got {n}")
    return n


def add_speaker_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speakers", "who spoke: a speaker label (S1, S2, ... in order of appearance) per word")
    g.add_argument("--diarize", action="store_true",
                   help="label each word with its speaker (needs the speaker encoders: pip install susurrus[speakers])")
    add_encoder_arg(g)
    g.add_argument("--speakers", type=_count, default=None, metavar="N",
                   help="exactly N speakers (default: unknown, found from the audio)")
    g.add_argument("--min-speakers", type=_count, default=None, metavar="N", help="at least N speakers")
    g.add_argument("--max-speakers", type=_count, default=None, metavar="N",
                   help="at most N speakers: a further voice is merged into the nearest speaker")
    g.add_argument("--speaker-ref", action="append", default=None, metavar="NAME=CLIP",
                   help="a known speaker: their words are labelled NAME (a clip of 2 s of speech or more; "
                        "repeat for more)")


def add_encoder_arg(g) -> None:
    from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_NAMES

    g.add_argument("--speaker-encoder", choices=ENCODER_NAMES, default=DEFAULT_ENCODER,
                   help="the voice-print network: campplus (CAM++, the default: voices far better told apart) "
                        "or ge2e (Resemblyzer's: about a third less CPU, close voices merged more often)")


def wants_speakers(args: argparse.Namespace) -> bool:
    return bool(args.diarize or args.speakers or args.speaker_ref or args.min_speakers or args.max_speakers)


def tracker_from_args(args: argparse.Namespace, keep_all: bool = False) -> SpeakerTracker | None:
    """The tracker the options ask for (None without them); bad options or clips are a
    ``UsageError`` that says which."""
    if not wants_speakers(args):
        return None
    from susurrus.speakers import make_tracker, parse_reference_args
    from susurrus.speakers.encoder import SpeakerEncoderMissing

    try:
        return make_tracker(args.speakers, args.min_speakers, args.max_speakers,
                            parse_reference_args(args.speaker_ref), keep_all=keep_all,
                            encoder=getattr(args, "speaker_encoder", None))
    except (ValueError, SpeakerEncoderMissing) as e:
        raise UsageError(str(e)) from None
