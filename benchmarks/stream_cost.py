"""Streaming cost on the English dev items, for paired comparisons of engines and settings.

Streams every English item of a manifest through ``load_model(MODEL).stream()`` in 100 ms
pieces, as fast as it computes, on one torch thread, and prints the thread's CPU seconds per
audio-second (the first stream, a warm-up, is not counted); ``--texts`` writes the transcripts
(JSON list, manifest order) so that two runs can be compared text by text. It calls only what
every version of the engine had, so an older commit runs it too:

    git worktree add /tmp/old 7202832
    PYTHONPATH=/tmp/old python benchmarks/stream_cost.py --texts old.json
    python benchmarks/stream_cost.py --compute-type float32 --texts f32.json
    python benchmarks/stream_cost.py --texts auto.json

Alternate the runs (old, new, old, new): this host's speed drifts by more than the differences.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import read_manifest

# this checkout's ../shared/data (not the imported engine's: an older one may live elsewhere)
DATA = Path(os.environ.get("SUSURRUS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default=str(DATA / "dev" / "manifest.jsonl"))
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--compute-type", help="load_model's compute_type (default: the engine's own default)")
    ap.add_argument("--texts", help="write the transcripts here (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = (susurrus.load_model(args.model, compute_type=args.compute_type) if args.compute_type
             else susurrus.load_model(args.model))
    items = [i for i in read_manifest(Path(args.manifest)) if i.language == "en"]
    audio = [decode_audio(str(i.audio)) for i in items]
    seconds = sum(len(a) for a in audio) / 16000
    model.stream()  # the shared silence keys/values and the VAD are made on first use
    start, texts = time.thread_time(), []
    for samples in audio:
        stream = model.stream()
        for i in range(0, len(samples), 1600):
            stream.feed(samples[i:i + 1600])
        stream.finish()
        texts.append(stream.text)
    cost = (time.thread_time() - start) / seconds
    print(f"{args.model} ({getattr(model, 'compute_type', 'float32')}): {len(items)} items, {seconds:.1f} s of audio, "
          f"{cost:.4f} core-s per audio-second")
    if args.texts:
        Path(args.texts).write_text(json.dumps(texts))


if __name__ == "__main__":
    main()
