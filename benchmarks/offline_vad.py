"""Offline WER with and without the voice activity gate (``model.transcribe(vad=...)``).

Every English item of the given sets is transcribed offline twice, as ``susurrus transcribe``
runs it (``--beam-size``, 1 = the bench's greedy offline reference, 5 = the command's default;
temperature fallback, previous-text conditioning), once with ``vad=False`` (every 30 s window,
as Whisper) and once with ``vad=True`` (only the speech Silero VAD finds, ``decoding/gate.py``).
Prints the WER per set and per condition, the audio the gate kept, and every item whose text
differs, so that a cost can be read item by item.

    python benchmarks/offline_vad.py [--model tiny.en] [--sets dev,hard] [--beam-size 1]
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import error_counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--sets", default="dev,hard")
    ap.add_argument("--beam-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--per-condition", type=int, default=None, metavar="N",
                    help="at most N items of each condition (the first N in the manifest), for a quick subset")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = susurrus.load_model(args.model)
    items = [i for name in args.sets.split(",") for i in read_manifest(SHARED_DATA / name) if i.language == "en"]
    if args.per_condition:
        seen: dict[str, int] = {}
        subset = []
        for i in items:
            cond = i.conditions[1] if len(i.conditions) > 1 else i.conditions[0]
            seen[cond] = seen.get(cond, 0) + 1
            if seen[cond] <= args.per_condition:
                subset.append(i)
        items = subset
    rows = []  # (item, errors without, errors with, units, seconds, seconds kept, text without, text with)
    for item in tqdm(items, file=sys.stderr, disable=not sys.stderr.isatty()):
        audio = decode_audio(item.audio)
        texts, kept = [], 0.0
        for vad in (False, True):
            segments, info = model.transcribe(audio, beam_size=args.beam_size, language="en", vad=vad)
            texts.append(" ".join(s.text.strip() for s in segments))
            kept = info.duration_after_vad if vad else kept
        (e0, n), (e1, _) = error_counts(item.text, texts[0]), error_counts(item.text, texts[1])
        rows.append((item, e0, e1, n, len(audio) / 16000, kept, *texts))
        print(f"{item.id}\t{e0}\t{e1}\t{n}\t{'; '.join(item.conditions)}", file=sys.stderr, flush=True)  # partial runs

    def line(name: str, group: list) -> str:
        n = sum(r[3] for r in group)
        w0, w1 = 100 * sum(r[1] for r in group) / max(1, n), 100 * sum(r[2] for r in group) / max(1, n)
        s, k = sum(r[4] for r in group), sum(r[5] for r in group)
        return (f"| {name} | {len(group)} | {s / 60:.1f} | {100 * k / max(s, 1e-9):.0f} | {w0:.2f} | {w1:.2f} "
                f"| {w1 - w0:+.2f} | {sum(r[2] < r[1] for r in group)} / {sum(r[2] > r[1] for r in group)} |")

    print(f"\n{args.model}, beam {args.beam_size}, offline, English items\n")
    print("| set / condition | items | minutes | audio kept % | WER % no gate | WER % gate "
          "| Δ | items better / worse |")
    print("|---|---|---|---|---|---|---|---|")
    groups: dict[str, list] = {}
    for r in rows:
        for cond in r[0].conditions:
            groups.setdefault(cond, []).append(r)
    print(line("all", rows))
    for cond, group in sorted(groups.items(), key=lambda kv: (not kv[0].startswith("set:"), -len(kv[1]))):
        print(line(cond, group))
    print("\n| item | errors no gate | errors gate | no gate | gate |\n|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r[1] - r[2]):
        if r[6] != r[7]:
            print(f"| {r[0].id} | {r[1]} | {r[2]} | {r[6][:80]} | {r[7][:80]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
