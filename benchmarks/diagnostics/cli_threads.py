"""Torch threads for the command line: wall time of ``susurrus stream FILE`` and ``susurrus
transcribe FILE`` (each a fresh process, model load included) with 1 thread and with one per
core, with the machine as it is and with one more process spinning on a core (``while True:
pass``), as a newcomer's busy machine has. Prints a Markdown table; every run is listed.

    python benchmarks/diagnostics/cli_threads.py                       # jfk_inaugural.wav, 2 runs each
    python benchmarks/diagnostics/cli_threads.py --file X.wav --runs 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("SUSURRUS_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", default=str(DATA / "dev" / "audio" / "jfk_inaugural.wav"))
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for load in ("as is", "+1 busy core"):
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load != "as is" else None
            try:
                for command in ("stream", "transcribe"):
                    for threads in sorted({1, cores}):
                        argv = [sys.executable, "-m", "susurrus", command, args.file, "--threads", str(threads),
                                "--quiet", "-o", out]
                        before = os.getloadavg()[0]
                        walls = [timed(argv) for _ in range(args.runs)]
                        rows.append((command, threads, load, walls, before))
                        print(f"{command} --threads {threads} ({load}): {walls}", file=sys.stderr)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    name = Path(args.file).name
    print(f"\n{name}, {cores} cores; wall seconds of each run (process start and model load included); "
          "load: the 1-minute load average when the runs started\n")
    print("| command | threads | machine | wall s (each run) | load |")
    print("|---|---|---|---|---|")
    for command, threads, load, walls, before in rows:
        print(f"| `susurrus {command} {name} --threads {threads}` | {threads} | {load} | "
              f"{' / '.join(f'{w:.1f}' for w in walls)} | {before:.1f} |")


if __name__ == "__main__":
    main()
