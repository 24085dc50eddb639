"""How fast this host's CPU is right now: a fixed piece of model-like work, timed again and again.

A shared 2-core VM does not run at one speed: what runs on the sibling hyperthread, the host's
other tenants and the memory bus move the CPU time of the same work by 10-20 % from one hour to
the next. A long benchmark that checks a cost per unit of work (the soak's compute per engine
step) cannot tell that from a server getting slower unless it measures the host beside it. This
probe does: every ``--every`` seconds it runs the same work (a transformer layer of tiny.en's
width over 107 frames, one step's encoder input, on one thread) and prints the thread CPU
milliseconds it took, the median of ``--repeats`` timings, one number per line. At the defaults
(5 timings of ~10 ms every 10 s, on this machine) it costs about 0.5 % of one core.

    python benchmarks/host_probe.py --every 10     # what the soak runs beside the server (--probe-s)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def make_work():
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(384, 6, 1536, dropout=0.0, batch_first=True).eval()
    x = torch.randn(1, 107, 384)

    def work(n: int) -> float:
        t0 = time.thread_time()
        with torch.inference_mode():
            for _ in range(n):
                layer(x)
        return 1000 * (time.thread_time() - t0)

    return work


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=10.0, help="seconds between probes (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per probe, their median printed")
    ap.add_argument("--layers", type=int, default=4, help="layer passes per timing (tiny.en's encoder has 4)")
    ap.add_argument("--count", type=int, default=0, help="stop after this many probes (0: run until killed)")
    args = ap.parse_args()
    work = make_work()
    work(args.layers * 3)  # warm up the kernels
    done = 0
    while args.count == 0 or done < args.count:
        print(f"{statistics.median(work(args.layers) for _ in range(args.repeats)):.3f}", flush=True)
        done += 1
        if args.count == 0 or done < args.count:
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
