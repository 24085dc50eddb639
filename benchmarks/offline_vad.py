"""Offline WER with and without the voice activity gate (``model.transcribe(vad=...)``).

Every item of the given sets is transcribed offline twice, as ``susurrus transcribe``
runs it (``--beam-size``, 1 = the bench's greedy offline reference, 5 = the command's default;
temperature fallback, previous-text conditioning), once with ``vad=False`` (every 30 s window,
as Whisper) and once with ``vad=True`` (only the speech Silero VAD finds, ``decoding/gate.py``).
English items go through ``--model``, the others through ``--multi-model`` (multilingual;
their language given, as the bench gives it; zh and ja scored by characters). Prints the error
rate per set and per condition, the audio the gate kept, and every item whose text differs, so
that a cost can be read item by item. Then each non-speech signal of ``benchmarks/nonspeech.py``
(``--nonspeech-seconds`` long: digital silence, white and pink noise, music, chimes) through
``--model``, with and without the gate: the words each gives (the gate's job is none).

    python benchmarks/offline_vad.py [--model tiny.en] [--multi-model base] [--sets dev,hard,multi]
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.bench import unit_for
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import error_counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--multi-model", default="base", help="the model for items not in English (multilingual)")
    ap.add_argument("--sets", default="dev,hard,multi")
    ap.add_argument("--beam-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--per-condition", type=int, default=None, metavar="N",
                    help="at most N items of each condition (the first N in the manifest), for a quick subset")
    ap.add_argument("--nonspeech-seconds", type=float, default=30.0, metavar="S",
                    help="how long each non-speech signal is (0: none)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    items = [i for name in args.sets.split(",") if name for i in read_manifest(SHARED_DATA / name)]
    models = {"en": susurrus.load_model(args.model)}
    if models["en"].is_multilingual:
        models["other"] = models["en"]
    elif any(i.language != "en" for i in items):
        models["other"] = susurrus.load_model(args.multi_model)
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
        model = models["en" if item.language == "en" else "other"]
        for vad in (False, True):
            segments, info = model.transcribe(audio, beam_size=args.beam_size, language=item.language, vad=vad)
            texts.append(" ".join(s.text.strip() for s in segments))
            kept = info.duration_after_vad if vad else kept
        unit = unit_for(item.language)
        (e0, n), (e1, _) = (error_counts(item.text, t, item.language, unit) for t in texts)
        rows.append((item, e0, e1, n, len(audio) / 16000, kept, *texts))
        print(f"{item.id}\t{e0}\t{e1}\t{n}\t{'; '.join(item.conditions)}", file=sys.stderr, flush=True)  # partial runs

    def line(name: str, group: list) -> str:
        n = sum(r[3] for r in group)
        w0, w1 = 100 * sum(r[1] for r in group) / max(1, n), 100 * sum(r[2] for r in group) / max(1, n)
        s, k = sum(r[4] for r in group), sum(r[5] for r in group)
        return (f"| {name} | {len(group)} | {s / 60:.1f} | {100 * k / max(s, 1e-9):.0f} | {w0:.2f} | {w1:.2f} "
                f"| {w1 - w0:+.2f} | {sum(r[2] < r[1] for r in group)} / {sum(r[2] > r[1] for r in group)} |")

    names = args.model + (f" (English), {args.multi_model} (the others)" if "other" in models
                          and models["other"] is not models["en"] else "")
    print(f"\n{names}, beam {args.beam_size}, offline; WER %, CER % for zh and ja\n")
    print("| set / condition | items | minutes | audio kept % | WER % no gate | WER % gate "
          "| Δ | items better / worse |")  # WER: CER for zh / ja items
    print("|---|---|---|---|---|---|---|---|")
    groups: dict[str, list] = {}
    for r in rows:
        for cond in [*r[0].conditions, *([f"language: {r[0].language}"] if r[0].language != "en" else [])]:
            groups.setdefault(cond, []).append(r)
    print(line("all", rows))
    for cond, group in sorted(groups.items(), key=lambda kv: (not kv[0].startswith("set:"), -len(kv[1]))):
        print(line(cond, group))
    print("\n| item | errors no gate | errors gate | no gate | gate |\n|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r[1] - r[2]):
        if r[6] != r[7]:
            print(f"| {r[0].id} | {r[1]} | {r[2]} | {r[6][:80]} | {r[7][:80]} |")
    if args.nonspeech_seconds > 0:
        nonspeech(models["en"], args)
    return 0


def nonspeech(model: susurrus.WhisperModel, args: argparse.Namespace) -> None:
    from nonspeech import SIGNALS  # benchmarks/nonspeech.py, beside this script

    print(f"\n{args.model}, beam {args.beam_size}, offline, {args.nonspeech_seconds:g} s of each signal\n")
    print("| signal | words no gate | words gate | audio kept % | text no gate | text gate |")
    print("|---|---|---|---|---|---|")
    for name, make in SIGNALS.items():
        try:
            audio = make(args.nonspeech_seconds)
        except ModuleNotFoundError as e:
            print(f"| {name} | skipped: {e} | | | | |")
            continue
        texts, kept = [], 0.0
        for vad in (False, True):
            segments, info = model.transcribe(audio, beam_size=args.beam_size, language="en", vad=vad)
            texts.append(" ".join(s.text.strip() for s in segments))
            kept = info.duration_after_vad if vad else kept
        print(f"| {name} | {len(texts[0].split())} | {len(texts[1].split())} | "
              f"{100 * kept / (len(audio) / 16000):.0f} | {texts[0][:60]} | {texts[1][:60]} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
