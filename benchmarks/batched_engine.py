"""Engine cost per stream when many streams are stepped together in one process.

N streams, each a different English dev recording (cycled; every stream gets the same number
of seconds), fed 100 ms at a time round-robin as fast as the CPU goes (the engine's cost, not
real-time pacing: see server_concurrency.py for that). For each N: the unbatched engine (each
stream's ``feed`` alone, in turn) and the batched one (``model.streams()``: every stream's
piece in one ``batch.feed``), core-seconds of this process per audio-second, resident memory,
and whether each stream's words (text, then times) equal its words alone.

All streams start together by default, so their 640 ms steps fall in the same rounds (the best
case for packing). ``--staggered`` starts stream j (3 j mod 7) pieces late, so their steps fall
in different rounds, as a server's sessions do (their clients connect at different times).

    python benchmarks/batched_engine.py --streams 1,8,16,32,48 --seconds 30
    python benchmarks/batched_engine.py --streams 8,16,32 --seconds 30 --no-alone --staggered

``--ops`` counts instead what a GPU would launch and wait for (``susurrus.evaluation.dispatch``):
N streams of JFK, 4 s each to warm up, then one 640 ms step of every stream in one
``batch.feed``, under a ``TorchDispatchMode``: ops dispatched (each a kernel launch on a GPU) per
part (each kind of model call, and the streams' own work between calls), device-to-host copies a GPU
would make (``calls._host_reads``) and host reads (``.item()``, ``.tolist()``, ``.numpy()``: a wait on a GPU
when made inside a model call), and the bytes a stream holds (its tensors,
``memory.held_bytes``) beside the formula's peak (``memory.stream_bytes``). Shapes that are not
embedded run with random weights (``random:large-v3-turbo``, seed 0), given English:

    python benchmarks/batched_engine.py --ops --streams 1,8,32,128 --model tiny.en
    python benchmarks/batched_engine.py --ops --streams 1,8,32 --model random:large-v3-turbo
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import susurrus  # noqa: E402
from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import read_manifest  # noqa: E402

SR = 16000
PIECE = SR // 10


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def recordings(data: Path, n: int, seconds: float) -> list[np.ndarray]:
    items = [i for i in read_manifest(data / "dev" / "manifest.jsonl") if i.language == "en"]
    out = []
    for k in range(n):
        audio = decode_audio(items[k % len(items)].audio)
        reps = int(np.ceil(seconds * SR / len(audio)))
        gap = np.zeros(SR // 2, np.float32)  # recordings back to back, half a second apart
        out.append(np.concatenate([np.concatenate([audio, gap])] * reps)[: int(seconds * SR)])
    return out


def pieces(audios: list[np.ndarray], staggered: bool = False):
    """Each round's pieces: ``{stream index: samples}``, 100 ms each, stream j starting (3 j mod 7)
    pieces late when ``staggered``."""
    late = [((3 * j) % 7 if staggered else 0) * PIECE for j in range(len(audios))]
    for i in range(0, max(len(a) + d for a, d in zip(audios, late)), PIECE):
        yield {j: a[i - d:i - d + PIECE] for j, (a, d) in enumerate(zip(audios, late)) if 0 <= i - d < len(a)}


def run_alone(model, audios: list[np.ndarray], staggered: bool = False) -> tuple[float, list]:
    streams = [model.stream() for _ in audios]
    c0 = time.process_time()
    for piece in pieces(audios, staggered):
        for j, samples in piece.items():
            streams[j].feed(samples)
    for s in streams:
        s.finish()
    return time.process_time() - c0, [s.words for s in streams]


def run_batched(model, audios: list[np.ndarray], staggered: bool = False) -> tuple[float, list, float, float, dict]:
    """Core-seconds, each stream's words, RSS per stream (MB), calls per round and what each
    kind of model call cost (``StreamBatch.costs``)."""
    batch = model.streams()
    base = rss_mb()
    streams = [batch.stream() for _ in audios]
    c0 = time.process_time()
    peak = base
    for k, piece in enumerate(pieces(audios, staggered)):
        batch.feed({streams[j]: samples for j, samples in piece.items()})
        if k % 50 == 0:
            peak = max(peak, rss_mb())
    batch.finish(streams)
    return (time.process_time() - c0, [s.words for s in streams], (max(peak, rss_mb()) - base) / len(audios),
            batch.calls_per_round, batch.costs)


def breakdown(n: int, spent: float, total: float, costs: dict) -> None:
    """Where ``n`` batched streams' compute went: each kind of model call, then the rest."""
    print(f"\n{n} streams: where the compute went (core-s per audio-second; a pass is one packed call, or one call "
          "run alone)\n")
    print("| part | core-s/s | share | passes per stream-second | calls per pass | ms per pass |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, cost in sorted(costs.items(), key=lambda kv: -kv[1].seconds):
        print(f"| {kind} | {cost.seconds / total:.4f} | {cost.seconds / spent:.0%} | {cost.passes / total:.2f} | "
              f"{cost.calls / max(1, cost.passes):.2f} | {1000 * cost.seconds / max(1, cost.passes):.1f} |")
    rest = spent - sum(c.seconds for c in costs.values())
    print(f"| the streams' own Python (steps, features, stems, words) | {rest / total:.4f} | {rest / spent:.0%} "
          "| | | |")
    print(f"| all | {spent / total:.4f} | 100% | | | |\n")


def ops(model, counts: list[int]) -> None:
    """The ``--ops`` table (module docstring)."""
    from susurrus.evaluation.dispatch import counting
    from susurrus.model.memory import held_bytes, stream_bytes

    audio = decode_audio(susurrus.example_audio())
    language = {"language": "en"} if model.is_multilingual else {}
    warm, step = 4 * SR, int(0.64 * SR)
    parts = ("stream", "VadFrames", "EncodeFrames", "CrossKV", "DecodeTokens")
    dtype = next(model.net.parameters()).dtype
    print(f"model {model.name} ({model.compute_type}, {dtype}), one 640 ms step of every stream after 4 s of JFK\n")
    print("| streams | ops | ops per stream | x one stream | " + " | ".join(f"{p} ops" for p in parts)
          + " | passes | device-to-host copies (where) | host reads (where) | MiB held per stream "
            "| formula's peak MiB |")
    print("|---:|---:|---:|---:|" + "---:|" * len(parts) + "---|---|---|---:|---:|")
    one = None
    for n in counts:
        batch = model.streams()
        streams = [batch.stream(**language) for _ in range(n)]
        batch.feed({s: audio[:warm] for s in streams})
        with counting() as c:
            batch.feed({s: audio[warm:warm + step] for s in streams})
        one = c.total if n == 1 else one
        held = sum(held_bytes(s) for s in streams) / n / 2**20
        passes = ", ".join(f"{k} {v}" for k, v in sorted(c.calls.items()))
        where = ", ".join(f"{k} {v}" for k, v in sorted(c.reads.items()))
        copies = ", ".join(f"{k} {v}" for k, v in sorted(c.transfers.items()))
        print(f"| {n} | {c.total:,} | {c.total / n:,.0f} | {f'{c.total / one:.1f}' if one else ''} | "
              + " | ".join(f"{c.ops[p]:,}" for p in parts)
              + f" | {passes} | {sum(c.transfers.values())} ({copies}) | {c.host_reads:,} ({where}) | {held:.1f} | "
              f"{stream_bytes(model.net.dims, dtype).total / 2**20:.1f} |", flush=True)
        del batch, streams
        gc.collect()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,8,16,32,48", help="stream counts, comma-separated")
    ap.add_argument("--seconds", type=float, default=30.0, help="audio per stream")
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--compute-type", default="auto", help="load_model's compute_type (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-alone", action="store_true", help="skip the unbatched runs (and the exactness check)")
    ap.add_argument("--breakdown", action="store_true",
                    help="after each count's row, its compute per kind of model call and the streams' own Python")
    ap.add_argument("--staggered", action="store_true",
                    help="start the streams at different times (steps in different rounds, as a server's sessions)")
    ap.add_argument("--ops", action="store_true",
                    help="count ops dispatched and host reads per 640 ms step instead of timing (module docstring)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = susurrus.load_model(args.model, compute_type=args.compute_type)
    if args.ops:
        return ops(model, [int(x) for x in args.streams.split(",")])
    model.stream()
    counts = [int(x) for x in args.streams.split(",")]
    warm = recordings(args.data, 2, 5.0)  # a first run pays for allocations the later ones reuse
    run_batched(model, warm)
    run_alone(model, warm)
    print(f"model {args.model} ({model.compute_type}), {args.threads} thread(s), {args.seconds:.0f} s of audio per "
          f"stream, 100 ms pieces, streams {'staggered' if args.staggered else 'starting together'}; core-s of this "
          f"process per audio-second\n")
    print("| streams | unbatched core-s/s | batched core-s/s | batched / unbatched | RSS per stream (MB) | "
          "calls per round | streams with the same text as alone | words differing | "
          "streams with the same word times too | largest word-start shift s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        audios = recordings(args.data, n, args.seconds)
        total = sum(len(a) for a in audios) / SR
        gc.collect()
        cb, words_b, rss, per_round, costs = run_batched(model, audios, args.staggered)
        if args.no_alone:
            print(f"| {n} | | {cb / total:.4f} | | {rss:.1f} | {per_round:.2f} | | | | |", flush=True)
            if args.breakdown:
                breakdown(n, cb, total, costs)
            continue
        ca, words_a = run_alone(model, audios, args.staggered)
        same_text = sum([w.word for w in a] == [w.word for w in b] for a, b in zip(words_a, words_b))
        same = sum([(w.word, w.start, w.end) for w in a] == [(w.word, w.start, w.end) for w in b]
                   for a, b in zip(words_a, words_b))
        shift = max((abs(x.start - y.start) for a, b in zip(words_a, words_b) for x, y in zip(a, b)
                     if x.word == y.word), default=0.0)
        differing = sum(sum(x.word != y.word for x, y in zip(a, b)) + abs(len(a) - len(b))
                        for a, b in zip(words_a, words_b))
        n_words = sum(len(a) for a in words_a)
        print(f"| {n} | {ca / total:.4f} | {cb / total:.4f} | {cb / ca:.2f} | {rss:.1f} | {per_round:.2f} | "
              f"{same_text}/{n} | {differing} of {n_words} | {same}/{n} | {shift:.2f} |", flush=True)
        if args.breakdown:
            breakdown(n, cb, total, costs)


if __name__ == "__main__":
    main()
