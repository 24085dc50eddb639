"""Endless-stream check: per-step cost and memory stay flat over an hour of audio.

Loops the long-form dev streams into one stream of at least ``--minutes`` minutes, streams it
through one session in 320 ms pieces (simulated real time), and prints per 10-minute stretch
the median step compute time and the process RSS at the stretch's end; then WER of the
first pass over each long-form stream beside the same model offline, and the longest run of
a phrase repeated back to back in the committed text.

    python benchmarks/endless.py [--minutes 60] [--model tiny.en]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def max_repeat(words: list[str], longest: int = 8) -> tuple[int, str]:
    """Most back-to-back repetitions of any phrase of 1..longest words."""
    best, phrase = 1, ""
    for n in range(1, longest + 1):
        for i in range(len(words) - 2 * n + 1):
            k = 1
            while words[i + k * n:i + (k + 1) * n] == words[i:i + n]:
                k += 1
            if k > best:
                best, phrase = k, " ".join(words[i:i + n])
    return best, phrase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--stretch-minutes", type=float, default=10.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = read_manifest(args.manifest)
    clips = [decode_audio(i.audio) for i in items]
    loop = np.concatenate(clips)
    reps = int(np.ceil(args.minutes * 60 * 16000 / len(loop)))
    total = len(loop) * reps
    print(f"{args.model}: {reps} loops of {len(loop) / 16000 / 60:.1f} min = {total / 16000 / 60:.1f} min of audio")
    stream = model.stream()
    piece = stream.config.chunk_ms * 16
    stretch = int(args.stretch_minutes * 60 * 16000)
    rows, step_times, fed = [], [], 0
    cpu_mark = time.process_time()
    first_pass_words: list[list] = [[] for _ in clips]
    bounds = np.cumsum([0] + [len(c) for c in clips]) / 16000
    t0 = time.perf_counter()
    bar = tqdm(total=total // 16000, unit="s audio", file=sys.stderr)
    for _ in range(reps):
        for i in range(0, len(loop), piece):
            stream.feed(loop[i:i + piece])
            fed += len(loop[i:i + piece])
            bar.update(len(loop[i:i + piece]) / 16000)
            if fed % stretch < piece and fed >= stretch:
                steps = stream.stats[len(step_times):]
                step_times.extend(s.compute_s for s in steps)
                cpu = time.process_time()
                rows.append((fed / 16000 / 60, 1000 * statistics.median(s.compute_s for s in steps),
                             1000 * statistics.median(s.cpu_s for s in steps),
                             (cpu - cpu_mark) / (args.stretch_minutes * 60), rss_mb(),
                             len(stream.window.committed), stream.window.mel.shape[1]))
                cpu_mark = cpu
    stream.finish()
    bar.close()
    for w in stream.words:
        for k in range(len(clips)):
            if bounds[k] <= w.end <= bounds[k + 1]:
                first_pass_words[k].append(w)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s\n")
    print("| minutes streamed | median step ms (wall) | median step CPU ms | core-s / audio-s | RSS MB "
          "| window tokens | window mel frames |")
    print("|---|---|---|---|---|---|---|")
    for m, ms, cpu_ms, cost, rss, toks, frames in rows:
        print(f"| {m:.0f} | {ms:.1f} | {cpu_ms:.1f} | {cost:.3f} | {rss:.0f} | {toks} | {frames} |")
    first = rows[0]
    worst = [max(abs(r[k] / first[k] - 1) for r in rows) for k in (1, 2, 3, 4)]
    print(f"\nlargest deviation from the first stretch (per 10-minute stretch): median step time "
          f"{100 * worst[0]:.1f} % wall, {100 * worst[1]:.1f} % CPU; CPU per audio-second {100 * worst[2]:.1f} %; "
          f"RSS {100 * worst[3]:.1f} %")
    print("\n| long-form stream (first pass) | streaming WER % | offline WER % |\n|---|---|---|")
    for item, audio, words in zip(items, clips, first_pass_words):
        segments, _ = model.transcribe(audio, beam_size=1, temperature=0.0)
        offline = " ".join(s.text for s in segments)
        streamed = "".join(w.word for w in words)
        print(f"| {item.id} | {corpus_error_rate([(item.text, streamed)]):.2f} "
              f"| {corpus_error_rate([(item.text, offline)]):.2f} |")
    k, phrase = max_repeat(stream.text.split())
    print(f"\nlongest back-to-back repetition in {len(stream.text.split())} committed words: {k}x {phrase!r}")


if __name__ == "__main__":
    main()
