"""A whole recording sent at once to a loaded server: a default ``susurrus serve`` (a subprocess)
carries N realtime sessions at real-time pace (``server_concurrency.run_client``) and a CPU-bound
job runs on every core, while two clients send the 5.5-minute long-form file at once, one after
the other: ``susurrus client URL FILE`` and the README's OpenAI SDK Realtime snippet as written
(the file and the port substituted). Per client: whether ``completed`` came, its wall time, and
its transcript against ``susurrus stream FILE`` (words, WER): every word delivered or not.

    python benchmarks/long_file_under_load.py                   # 8 sessions, a busy loop per core
    python benchmarks/long_file_under_load.py --sessions 0 --no-burn
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import launch  # noqa: E402 - benchmarks/launch.py
from server_concurrency import chosen_audio, pct, run_client  # noqa: E402

from susurrus.evaluation.data import SHARED_DATA  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate  # noqa: E402

FILE = SHARED_DATA / "longform" / "audio" / "dev_all_english_concat.wav"


def burn() -> None:
    while True:
        pass


def readme_sdk_snippet(path: Path, port: int) -> str:
    """The README's Realtime snippet, with ``path`` for the example audio and the server's port."""
    code = next(s for s in re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
                if "client.realtime.connect" in s)
    assert "susurrus.example_audio()" in code and "ws://127.0.0.1:8000/v1" in code
    return code.replace("susurrus.example_audio()", repr(str(path))).replace("127.0.0.1:8000", f"127.0.0.1:{port}")


def run_client_process(cmd: list[str], timeout_s: float) -> tuple[str, float, int]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
        return p.stdout + p.stderr, time.monotonic() - t0, p.returncode
    except subprocess.TimeoutExpired as e:
        return f"{e.stdout or ''}{e.stderr or ''}", time.monotonic() - t0, -1


def stream_text(path: Path, model: str) -> str:
    """What ``susurrus stream FILE`` gives (its txt output)."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "susurrus", "stream", str(path), "--quiet", "-f", "txt", "-o", out,
                        "--model", model], capture_output=True, check=True)
        return (Path(out) / f"{path.stem}.txt").read_text().strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=8, help="realtime sessions beside the clients (default: 8)")
    ap.add_argument("--no-burn", action="store_true", help="no CPU-bound job beside them")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="give a client up after this long")
    args = ap.parse_args()
    reference = stream_text(FILE, args.model)
    sessions = chosen_audio(Namespace(data=str(SHARED_DATA / "dev"), seconds=1200.0), args.sessions)
    server, port = launch.start_server(["--model", args.model, "--log-level", "warning"])
    burners = [] if args.no_burn else [multiprocessing.Process(target=burn, daemon=True)
                                       for _ in range(os.cpu_count() or 1)]
    clients = {
        "susurrus client": [sys.executable, "-m", "susurrus", "client", f"ws://127.0.0.1:{port}/v1/realtime",
                            str(FILE)],
        "README SDK snippet": [sys.executable, "-c", readme_sdk_snippet(FILE, port)],
    }
    rows = []
    try:
        for b in burners:
            b.start()

        async def run() -> None:
            start_at = time.perf_counter() + 0.5
            live = [asyncio.create_task(run_client(f"ws://127.0.0.1:{port}/v1/realtime", r, start_at + 0.5 * k))
                    for k, r in enumerate(sessions)]
            await asyncio.sleep(5.0 + 0.5 * len(sessions))
            for name, cmd in clients.items():
                out, wall, rc = await asyncio.to_thread(run_client_process, cmd, args.timeout_s)
                text = out.strip().splitlines()[-1] if out.strip() else ""
                if name == "susurrus client":  # it prints committed text as it comes: all of it
                    text = " ".join(line for line in out.splitlines() if not line.startswith("susurrus"))
                rows.append((name, rc, wall, text, out))
            for task in live:
                task.cancel()
            await asyncio.gather(*live, return_exceptions=True)

        asyncio.run(run())
    finally:
        for b in burners:
            b.terminate()
        server.terminate()
        server.wait(timeout=30)
    lat = [x for r in sessions for x in r.wall_latency]
    load = f"{args.sessions} realtime sessions" + ("" if args.no_burn else f" and {len(burners)} busy loops")
    print(f"\n{args.model}, default `susurrus serve`, {FILE.name} (330 s) sent at once beside {load}"
          + (f" (sessions' per-word wall latency p50 {pct(lat, 50):.2f} s, p95 {pct(lat, 95):.2f} s)" if lat else ""))
    print(f"`susurrus stream` gives {len(reference.split())} words\n")
    print("| client | exit | wall s | words | WER % vs `susurrus stream` |")
    print("|---|---|---|---|---|")
    for name, rc, wall, text, out in rows:
        wer = corpus_error_rate([(reference, text)]) if text else 100.0
        print(f"| {name} | {rc} | {wall:.0f} | {len(text.split())} | {wer:.2f} |")
        if rc != 0:
            print(f"  {name} output tail: {out[-500:]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
