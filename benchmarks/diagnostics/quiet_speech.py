"""Speech recorded far below full scale: what the gate and the stream keep of it.

Every English item of a data set (``../shared/data/dev`` unless ``--data`` says another) is
scaled so its loudest sample sits at each ``--peaks`` level (dBFS) and transcribed twice with
the same model: offline (greedy with the temperature fallback, as ``susurrus transcribe
--beam-size 1``) and streamed at the default setting, fed in 100 ms pieces. Per level: WER % of
each against the references, the stream's audio the voice activity gate never let the engine
encode (``StreamSession.skipped``), and the streams that came out empty.

    python benchmarks/diagnostics/quiet_speech.py [--peaks=-40,-50,-55,-60,-65] [--model tiny.en]
    python benchmarks/diagnostics/quiet_speech.py --data ../shared/data/hard --peaks=-20,-30,-45   # speech in noise
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import error_counts
from susurrus.evaluation.reference import offline_reference
from susurrus.evaluation.signals import at_peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peaks", default="-40,-50,-55,-60,-65", help="peak levels, dBFS, comma-separated")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", default=str(SHARED_DATA / "dev"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = [i for i in read_manifest(Path(args.data) / "manifest.jsonl") if i.language == "en" and i.text]
    audio = {i.id: decode_audio(i.audio) for i in items}
    language = "en" if model.is_multilingual else None
    rows = []
    for peak in (float(p) for p in args.peaks.split(",")):
        stream_err = off_err = n = empty = 0
        skipped = 0.0
        for item in tqdm(items, desc=f"{peak:g} dBFS", file=sys.stderr, disable=not sys.stderr.isatty()):
            x = at_peak(audio[item.id], peak)
            offline_text, _ = offline_reference(model, x, language)
            stream = model.stream(language=language)
            for i in range(0, len(x), 1600):
                stream.feed(x[i:i + 1600])
            stream.finish()
            e, k = error_counts(item.text, stream.text)
            stream_err, n = stream_err + e, n + k
            off_err += error_counts(item.text, offline_text)[0]
            skipped += sum(b - a for a, b in stream.skipped)
            empty += not stream.text.strip()
        rows.append(f"| {peak:g} | {100 * stream_err / n:.2f} | {100 * off_err / n:.2f} | {skipped:.1f} "
                    f"| {empty} of {len(items)} |")
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"\n{args.model}, {len(items)} English items of {Path(args.data).name}, each scaled to its peak level\n")
    print("| peak dBFS | stream WER % | offline WER % | audio the gate skipped s | streams empty |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
