"""int8 linear layers: WER and CPU cost against float32, offline and streaming.

For each model and each English item of the dev manifest, every compute type in turn (so that
whatever else runs on the machine weighs on all of them alike): the offline transcription as
``susurrus bench`` makes its reference (greedy with the temperature fallback, word timestamps)
and the stream with the default preset (English forced on multilingual models), scored with the
bench's own functions. Core-seconds per audio-second are process CPU time at one thread.

    python benchmarks/int8.py [--models tiny.en,base] [--compute-types float32,int8] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import susurrus  # noqa: E402
from susurrus.api import COMPUTE_TYPES  # noqa: E402
from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.bench import BenchResult, score_item, stream_item  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.reference import offline_reference  # noqa: E402
from susurrus.streaming.session import silence_cross_kv, stream_config  # noqa: E402
from susurrus.streaming.vad import load_vad  # noqa: E402

HEADER = ("| model | compute type | offline WER % | Δ offline | stream WER % | Δ stream | offline core-s / audio-s "
          "| ratio | stream core-s / audio-s | ratio | stream latency mean s "
          "| same text as float32 (offline / stream) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


def measure(name: str, compute_types: list[str], items, audio, latency: str, progress: bool = True) -> dict:
    """Every item through every compute type of model ``name``, interleaved item by item."""
    models = {ct: susurrus.load_model(name, compute_type=ct) for ct in compute_types}
    first = models[compute_types[0]]
    language = "en" if first.is_multilingual else None
    config = stream_config(latency, language=language)
    vad = load_vad()
    silence = {ct: silence_cross_kv(m.net) for ct, m in models.items()}
    results = {ct: BenchResult(config=config) for ct in compute_types}
    offline_cpu = dict.fromkeys(compute_types, 0.0)
    for ct, m in models.items():  # warm-up, untimed
        warm = audio[items[0].id][:16000 * 3]
        offline_reference(m, warm, language)
        stream_item(m.net, m.tokenizer, warm, config, silence[ct], vad)
    for item in tqdm(items, desc=name, disable=not progress, file=sys.stderr):
        samples = audio[item.id]
        for ct, m in models.items():
            c0 = time.process_time()
            offline = offline_reference(m, samples, language)
            offline_cpu[ct] += time.process_time() - c0
            session, cpu = stream_item(m.net, m.tokenizer, samples, config, silence[ct], vad)
            results[ct].items.append(score_item(item, session, offline, len(samples) / 16000, cpu))
    return {"results": results, "offline_cpu": offline_cpu}


def rows(name: str, measured: dict) -> list[str]:
    results: dict[str, BenchResult] = measured["results"]
    ref_ct = next(iter(results))
    ref = results[ref_ct]
    audio_s = ref.audio_s
    ref_off = measured["offline_cpu"][ref_ct] / audio_s
    out = []
    for ct, r in results.items():
        off = measured["offline_cpu"][ct] / audio_s
        same_off = sum(a.offline_text == b.offline_text for a, b in zip(r.items, ref.items))
        same_stream = sum(a.stream_text == b.stream_text for a, b in zip(r.items, ref.items))
        out.append(f"| {name} | {ct} | {r.offline_wer:.2f} | {r.offline_wer - ref.offline_wer:+.2f} | {r.wer:.2f} "
                   f"| {r.wer - ref.wer:+.2f} | {off:.3f} | {off / ref_off:.2f} | {r.cost:.3f} "
                   f"| {r.cost / ref.cost:.2f} "
                   f"| {r.mean_latency:.2f} | {same_off}/{len(r.items)} / {same_stream}/{len(r.items)} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "dev"))
    ap.add_argument("--models", default="tiny.en,base", help="comma-separated (default: %(default)s)")
    ap.add_argument("--compute-types", default="float32,int8",
                    help=f"comma-separated, the first is the reference; of {list(COMPUTE_TYPES)} "
                         "(default: %(default)s)")
    ap.add_argument("--latency", default="medium", choices=["low", "medium", "high"], help="streaming preset")
    ap.add_argument("--limit", type=int, default=None, help="first N English items only")
    ap.add_argument("--json", default=None, help="write every item's texts and figures here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    compute_types = args.compute_types.split(",")
    items = [i for i in read_manifest(args.manifest) if i.language == "en"][: args.limit]
    audio = {i.id: decode_audio(i.audio) for i in items}
    total = sum(len(a) for a in audio.values()) / 16000
    table, dump = [], {}
    for name in args.models.split(","):
        measured = measure(name, compute_types, items, audio, args.latency)
        table += rows(name, measured)
        print("\n".join([HEADER, *table]), file=sys.stderr, flush=True)  # so far, in case of a later failure
        dump[name] = {ct: {"offline_cpu_s": measured["offline_cpu"][ct], "stream_wer": r.wer,
                           "offline_wer": r.offline_wer, "items": [asdict(i) for i in r.items]}
                      for ct, r in measured["results"].items()}
    print(f"\n{len(items)} English items, {total:.1f} s of audio, 1 thread, streaming preset {args.latency}\n")
    print("\n".join([HEADER, *table]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1, default=str)


if __name__ == "__main__":
    main()
