"""A server worker's memory under churn, in one process: does RSS follow what the streams hold?

Runs what a ``susurrus serve`` worker runs (``WorkerLoop``'s ``Lockstep``: every stream's step
generators stepped together, packed passes) for ``--minutes`` of wall time: ``--streams`` streams
at once, each fed random pieces (2-30 s) of the long-form and dev recordings with silences
(0.1-8 s) between them in 640 ms blocks as fast as it computes, finished after 20-200 s of audio
and replaced by a new one, as sessions come and go. Every 10 s it samples the process RSS; at the
end it prints the median RSS of each quarter of the run and how far the last quarters are from
the first.

The heap policy is a setting, so the variants compare in one command each:

* ``--trim closed`` trims the heap (glibc ``malloc_trim(0)``) after a stream closes (the workers'
  policy before 2026-12-02); ``--trim every:1`` every second of work (today's workers, see
  ``worker_process.heap_trimmer``); ``--trim none`` never;
* glibc's own settings come from the environment, e.g. ``MALLOC_MMAP_THRESHOLD_=1048576`` (a fixed
  mmap threshold) before the command.

    python benchmarks/worker_memory.py --minutes 20 --streams 8 --trim every:1
    MALLOC_MMAP_THRESHOLD_=65536 python benchmarks/worker_memory.py --trim closed

Also printed: the audio streamed (it depends on the CPU the run got: compare RSS by quarter, not
by time) and the mean time of one trim.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import susurrus  # noqa: E402
from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.streaming.calls import Lockstep  # noqa: E402

BLOCK = 640 * 16  # samples fed per request (one step at the default preset)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Session:
    """One stream and the audio it will be fed: pieces of recordings with silences between."""

    def __init__(self, model, clips: list[np.ndarray], rng: random.Random):
        self.stream = model.stream()
        parts, total, n = [], rng.uniform(20, 200) * 16000, 0
        while n < total:
            clip = rng.choice(clips)
            start = rng.randrange(0, max(1, len(clip) - 32000))
            piece = clip[start:start + int(rng.uniform(2, 30) * 16000)]
            pause = np.zeros(int(rng.uniform(0.1, 8) * 16000), np.float32)
            parts += [piece, pause]
            n += len(piece) + len(pause)
        self.audio = np.concatenate(parts)
        self.fed = 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=20.0, help="wall time to run (default: %(default)s)")
    ap.add_argument("--streams", type=int, default=8, help="streams at once (default: %(default)s)")
    ap.add_argument("--trim", default="every:1",
                    help="closed | every:SECONDS | none: when to trim the heap (default: %(default)s)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    trim = ctypes.CDLL("libc.so.6").malloc_trim if args.trim != "none" else None
    every = float(args.trim.split(":")[1]) if args.trim.startswith("every:") else None
    model = susurrus.load_model(args.model)
    model.stream()  # the shared end-of-audio context, as a worker loads it
    clips = [decode_audio(item.audio) for part in ("longform", "dev")
             for item in read_manifest(SHARED_DATA / part) if item.language == "en"]
    sessions = [Session(model, clips, rng) for _ in range(args.streams)]
    lockstep = Lockstep(model.net)
    trims: list[float] = []
    samples: list[tuple[float, float, int, float]] = []  # (wall s, audio s, streams closed, RSS MB)
    started = last_sample = last_trim = time.monotonic()
    audio_s, closed = 0.0, 0

    def do_trim() -> None:
        nonlocal last_trim
        t0 = time.perf_counter()
        trim(0)
        trims.append(time.perf_counter() - t0)
        last_trim = time.monotonic()

    while time.monotonic() - started < args.minutes * 60:
        ending = []
        for s in sessions:
            if s.fed < len(s.audio):
                piece = s.audio[s.fed:s.fed + BLOCK]
                s.fed += len(piece)
                audio_s += len(piece) / 16000
                lockstep.add(s.stream.feed_steps(piece), lambda *_: None)
            else:
                lockstep.add(s.stream.finish_steps(), lambda *_: None)
                ending.append(s)
        while len(lockstep):
            lockstep.round()
        for s in ending:
            sessions[sessions.index(s)] = Session(model, clips, rng)
            closed += 1
            if trim is not None and args.trim == "closed":
                do_trim()
        if trim is not None and every is not None and time.monotonic() - last_trim >= every:
            do_trim()
        if time.monotonic() - last_sample >= 10:
            last_sample = time.monotonic()
            samples.append((last_sample - started, audio_s, closed, rss_mb()))
            print(f"{samples[-1][0]:6.0f} s wall  {audio_s:8.0f} s audio  {closed:4d} closed  "
                  f"RSS {samples[-1][3]:6.0f} MB", file=sys.stderr, flush=True)
    quarter = max(1, len(samples) // 4)
    medians = [statistics.median(r[3] for r in samples[k * quarter:(k + 1) * quarter]) for k in range(4)
               if samples[k * quarter:(k + 1) * quarter]]
    env = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("MALLOC_")) or "glibc defaults"
    print(f"\n{args.model}, {args.streams} streams stepped together, trim {args.trim}, {env}: "
          f"{audio_s:.0f} s of audio in {args.minutes:g} min, {closed} streams closed")
    print("\n| RSS median by quarter MB | last quarters against the first | max MB | mean trim ms |\n|---|---|---|---|")
    spread = " / ".join(f"{100 * (m / medians[0] - 1):+.1f} %" for m in medians[1:])
    mean_trim = f"{1000 * statistics.mean(trims):.1f}" if trims else "–"
    print(f"| {' / '.join(f'{m:.0f}' for m in medians)} | {spread} | {max(r[3] for r in samples):.0f} | {mean_trim} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
