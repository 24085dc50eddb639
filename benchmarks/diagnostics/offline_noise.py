"""How far offline Whisper moves from itself, item by item: the floor under "no item more than
15 points worse than offline".

For every item (English by default) the reference is the bench's: the same model as
``susurrus transcribe --beam-size 1`` runs it (greedy with the temperature fallback). Beside it,
offline transcriptions of the same audio changed in ways that should not matter: ``--shift-ms``
of digital silence before the audio, beam 5 (``susurrus transcribe``'s default), and decoding
without timestamp tokens (``--without-timestamps``: how the stream decodes). Per set:
WER of each, and how many items each gets more than 15 points worse / better than the
reference: what near-ties on short, hard items look like without any streaming.

    python benchmarks/diagnostics/offline_noise.py ../shared/data/hard ../shared/data/dev \
        [--offline-cache /tmp/off_tiny_all.json] [--shift-ms 200]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import read_items
from susurrus.evaluation.metrics import error_counts
from susurrus.evaluation.reference import cached_offline, load_offline_cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="manifests or folders holding one (labelled items only)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--language", default="en")
    ap.add_argument("--shift-ms", type=int, default=200, help="digital silence put before the audio")
    ap.add_argument("--offline-cache", help="the bench's offline cache (the reference), read and extended")
    ap.add_argument("--json", help="every item's texts, one per variant")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = [i for i in read_items(args.inputs) if i.text and (i.language or "en") == args.language]
    cache = load_offline_cache(args.offline_cache)
    variants = ("reference", f"{args.shift_ms} ms silence before", "beam 5", "without timestamps")
    rows: dict[str, dict[str, list]] = {}
    out = {}
    for item in tqdm(items, desc="offline", file=sys.stderr, disable=not sys.stderr.isatty()):
        audio = decode_audio(item.audio)
        language = args.language if model.is_multilingual else None  # as the bench gives it
        shifted = np.concatenate([np.zeros(16 * args.shift_ms, np.float32), audio])
        texts = [cached_offline(model, cache, item.id, audio, language)[0]]
        for audio_in, beam, plain in ((shifted, 1, False), (audio, 5, False), (audio, 1, True)):
            segments, _ = model.transcribe(audio_in, beam_size=beam, language=args.language,
                                           without_timestamps=plain)
            texts.append(" ".join(s.text.strip() for s in segments))
        out[item.id] = dict(zip(variants, texts))
        counts = [error_counts(item.text, t, args.language, "word") for t in texts]
        set_name = next((c for c in item.conditions if c.startswith("set: ")), "all")
        for group in (set_name, "all"):
            rows.setdefault(group, {v: [] for v in variants})
            for v, (errors, n) in zip(variants, counts):
                rows[group][v].append((errors, n))
    if args.offline_cache:
        with open(args.offline_cache, "w") as f:
            json.dump(cache, f)
    print(f"\n{args.model}, {len(items)} items; reference: greedy with the temperature fallback\n")
    print("| set | variant | WER % | items > 15 points worse / better than the reference |\n|---|---|---|---|")
    for group, by_variant in rows.items():
        ref = by_variant["reference"]
        for v, counts in by_variant.items():
            wer = 100 * sum(e for e, _ in counts) / max(1, sum(n for _, n in counts))
            worse = sum((e - r) / n * 100 > 15 for (e, n), (r, _) in zip(counts, ref))
            better = sum((r - e) / n * 100 > 15 for (e, n), (r, _) in zip(counts, ref))
            print(f"| {group} | {v} | {wer:.2f} | {'-' if v == 'reference' else f'{worse} / {better}'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
