"""Word-timestamp accuracy on the long-form dev streams.

Each stream carries per-utterance ``segments`` (start/end seconds and text). The committed
words of an offline transcription with word timestamps are aligned to the reference words
(normalised, edit-distance alignment); for every utterance whose first and last reference
words are matched, the matched words' start/end are compared with the segment boundaries.

    python benchmarks/word_timestamps.py [--manifest ../shared/data/longform] [--model tiny.en]
"""

from __future__ import annotations

import argparse
import sys

import torch

import susurrus
from susurrus.evaluation.alignment import boundary_errors
from susurrus.evaluation.data import SHARED_DATA, read_manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    print("| stream | utterances | first word within tol | last word within tol | both | "
          "median abs error start / end (s) |")
    print("|---|---|---|---|---|---|")
    for item in read_manifest(args.manifest):
        segments, _ = model.transcribe(item.audio, word_timestamps=True, beam_size=args.beam_size,
                                       language="en")
        words = [w for s in segments for w in s.words or []]
        all_rows = boundary_errors(item.segments, words)
        rows = [r for r in all_rows if r is not None]  # unmatched utterances count as misses
        n = len(all_rows)
        start_ok = sum(abs(r[0]) <= args.tolerance for r in rows)
        end_ok = sum(abs(r[1]) <= args.tolerance for r in rows)
        both = sum(abs(r[0]) <= args.tolerance and abs(r[1]) <= args.tolerance for r in rows)
        med_s = float(torch.tensor([abs(r[0]) for r in rows]).median()) if rows else float("nan")
        med_e = float(torch.tensor([abs(r[1]) for r in rows]).median()) if rows else float("nan")
        print(f"| {item.id} | {n} | {start_ok}/{n} | {end_ok}/{n} | {both}/{n} ({100 * both / max(1, n):.0f} %) "
              f"| {med_s:.2f} / {med_e:.2f} |", flush=True)
        print(f"{item.id}: {len(words)} words", file=sys.stderr)


if __name__ == "__main__":
    main()
