"""Offline never crashes: every item of the shared data through ``model.transcribe``.

Each item of dev, hard and multi (and the long-form streams with ``--longform``) is transcribed
with each model as ``susurrus transcribe`` runs it (beam 5 unless ``--beam-size``, temperature
fallback; multilingual models detect the language), and every exception is counted and printed
with its item. English-only models get the non-English items too: they must not crash on them.

    python benchmarks/transcribe_all.py [--models tiny.en,base] [--beam-size 5] [--sets dev,hard,multi]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, read_manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--sets", default="dev,hard,multi")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    items = [item for name in args.sets.split(",") for item in read_manifest(SHARED_DATA / name)]
    print("| model | items | audio min | exceptions | wall s |\n|---|---|---|---|---|")
    failures = 0
    for name in args.models.split(","):
        model = susurrus.load_model(name)
        errors: list[str] = []
        audio_s = 0.0
        t0 = time.perf_counter()
        for item in tqdm(items, desc=name, file=sys.stderr, disable=not sys.stderr.isatty()):
            try:
                audio = decode_audio(item.audio)
                audio_s += len(audio) / 16000
                segments, _ = model.transcribe(audio, beam_size=args.beam_size, word_timestamps=True)
                list(segments)
            except Exception:  # noqa: BLE001 - counting every failure is the point
                errors.append(f"{item.id}: {traceback.format_exc(limit=3)}")
        print(f"| {name} | {len(items)} | {audio_s / 60:.1f} | {len(errors)} | {time.perf_counter() - t0:.0f} |",
              flush=True)
        for e in errors:
            print(e, file=sys.stderr)
        failures += len(errors)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
