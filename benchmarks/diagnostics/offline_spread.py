"""How far two offline decodings of the same weights are apart, item by item.

``susurrus bench`` counts the items whose stream is more than 15 WER points worse than the same
model offline, greedy with the temperature fallback (``susurrus transcribe --beam-size 1``).
This runs that greedy decoding and the model's default, beam 5 (``susurrus transcribe``), on
every English item of the given sets and counts the same thing between the two: the spread of
per-item WER that a change of decoding alone brings, beside which the stream's count is read.

    python benchmarks/diagnostics/offline_spread.py [--sets hard,dev] [--model tiny.en]
"""

from __future__ import annotations

import argparse

import torch

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import error_counts

WORSE = 15.0  # points, as the bench's "items > 15 points worse than offline"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="hard,dev", help="folders of the shared data, comma-separated")
    ap.add_argument("--model", default="tiny.en")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    print(f"\n{args.model} ({model.compute_type}), offline, English items\n")
    print(f"| set | items | beam 5 WER % | greedy WER % | beam 5 more than {WORSE:g} points worse than greedy | "
          f"greedy more than {WORSE:g} points worse than beam 5 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.sets.split(","):
        rows = []
        for item in read_manifest(SHARED_DATA / name):
            if item.language != "en":
                continue
            audio = decode_audio(item.audio)
            texts = ["".join(s.text for s in model.transcribe(audio, beam_size=beam, language="en")[0])
                     for beam in (1, 5)]
            (greedy, n), (beam5, _) = (error_counts(item.text, t) for t in texts)
            rows.append((n, greedy, beam5))
        units = sum(n for n, _, _ in rows)
        worse = sum(1 for n, g, b in rows if n and 100 * (b - g) / n > WORSE)
        better = sum(1 for n, g, b in rows if n and 100 * (g - b) / n > WORSE)
        print(f"| {name} | {len(rows)} | {100 * sum(b for _, _, b in rows) / units:.2f} | "
              f"{100 * sum(g for _, g, _ in rows) / units:.2f} | {worse} | {better} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
