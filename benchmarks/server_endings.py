"""How the realtime server ends sessions that go wrong, measured on ``susurrus serve`` (tiny.en,
``--workers`` processes, loopback):

``slow-reader``: clients that stop reading. ``--clients`` normal clients stream different dev
recordings at real-time pace (as ``server_concurrency.py``) three times: alone (the baseline);
with ``--readers`` clients beside them that ask for events (``session.update``, answered with
~0.5 KB each) and never read a byte (a raw socket); and the same with the outgoing bound off
(``--max-outbound-kb 0``), to show what the bound saves. Per run: the RSS of the server process,
and of it with its workers, sampled every 0.5 s; how many non-readers the server closed
(``client_too_slow`` in ``/metrics``) and when only the normal sessions were left (the
open-sessions gauge); and the normal clients' word latency.

``sigterm``: ``--clients`` sessions stream at real-time pace (server turn detection on every
other one, the rest commit at the end), and the server gets SIGTERM ``--sigterm-after-s`` into
them. Per session: its items (committed or turns), which of them ended ``completed`` or
``failed`` (every one must), the close code, and the seconds from SIGTERM to the close; the
server's exit time against ``--drain-s`` and its last log line's audio balance.

    python benchmarks/server_endings.py slow-reader --clients 8 --readers 4 --seconds 30
    python benchmarks/server_endings.py sigterm --clients 8 --seconds 40 --sigterm-after-s 15
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

import launch  # noqa: E402 - benchmarks/launch.py
from server_concurrency import BLOCK, RATE, Result, chosen_audio, pct, run_client, server_rss_mb  # noqa: E402
from server_helpers import NeverReads  # noqa: E402 - a raw WebSocket client that never reads
from soak import http_get, parse_metrics  # noqa: E402

from susurrus.client import append_event, session_update  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA  # noqa: E402

COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"


def start_server(args: argparse.Namespace, *extra: str, log: Path | None = None) -> tuple[subprocess.Popen, int]:
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - the server's lifetime
    return launch.start_server(["--model", args.model, "--workers", str(args.workers), "--threads", "1",
                                "--max-sessions", "64", "--log-level", "info", *extra], log=out)


# ---------------------------------------------------------------------------- slow readers

def own_rss_mb(pid: int) -> float:
    """Resident memory (MB) of the server process alone (its outgoing queues live there)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metrics_of(port: int) -> dict[str, float]:
    return parse_metrics(http_get(f"http://127.0.0.1:{port}/metrics"))


@dataclass
class Reader:
    sent: int = 0  # session.update messages it sent


def never_reads(host: str, port: int, r: Reader, stop: threading.Event, most: int) -> None:
    """Send ``session.update`` after ``session.update`` (each answered with ~0.5 KB) and read
    nothing (``NeverReads``: a raw socket), so the server's events pile up in the sockets, then
    in the server's queue, until the normal clients are done. (How it ended is read from the
    server's ``/metrics``: a close the server sends waits unread behind the events, and is lost
    when the server cuts the connection.)"""
    c = NeverReads(SimpleNamespace(host=host, port=port, url=f"ws://{host}:{port}/v1/realtime"), {})
    update = json.dumps(session_update(RATE, latency="high"))
    with contextlib.suppress(OSError):  # the server may cut the connection while the client still sends
        while not stop.is_set() and r.sent < most:
            c.send(update)
            r.sent += 1
    stop.wait()
    c.sock.close()


def slow_reader_run(args: argparse.Namespace, readers: int, bound: bool) -> dict:
    results = chosen_audio(args, args.clients)
    extra = [] if bound else ["--max-outbound-kb", "0"]
    server, port = start_server(args, "--max-buffered-s", "600", *extra)
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    idle, own_idle = server_rss_mb(server.pid), own_rss_mb(server.pid)
    rss: list[float] = []
    own: list[float] = []
    gauge: list[tuple[float, float]] = []  # (seconds since the start, open sessions)
    t0 = time.perf_counter()
    outs = [Reader() for _ in range(readers)]
    try:
        async def everyone() -> None:
            stop = threading.Event()

            async def sample() -> None:
                while True:
                    rss.append(server_rss_mb(server.pid))
                    own.append(own_rss_mb(server.pid))
                    m = await asyncio.to_thread(metrics_of, port)
                    gauge.append((time.perf_counter() - t0, m.get("susurrus_sessions_open", float("nan"))))
                    await asyncio.sleep(0.5)

            sampler = asyncio.create_task(sample())
            start_at = time.perf_counter() + 0.5
            bad = [asyncio.create_task(asyncio.to_thread(never_reads, "127.0.0.1", port, r, stop, args.most_updates))
                   for r in outs]
            await asyncio.gather(*(run_client(url, r, start_at) for r in results))
            stop.set()
            await asyncio.gather(*bad)
            sampler.cancel()

        asyncio.run(everyone())
        too_slow = metrics_of(port).get('susurrus_errors_total{type="server_error",code="client_too_slow"}', 0.0)
    finally:
        server.terminate()
        server.wait(timeout=30)
    # when the gauge fell back to the normal clients alone, after the non-readers had joined
    joined = next((i for i, (_, n) in enumerate(gauge) if n >= args.clients + readers), None)
    freed = next((s for s, n in gauge[joined:] if n <= args.clients), float("nan")) if joined is not None and readers \
        else float("nan")
    wall = [x for r in results for x in r.wall_latency]
    return {"readers": readers, "bound": bound, "idle_rss": idle, "max_rss": max(rss), "end_rss": rss[-1],
            "own_idle": own_idle, "own_max": max(own), "own_end": own[-1], "too_slow": too_slow, "freed": freed,
            "outs": outs, "wall_mean": float(np.mean(wall)), "wall_p90": pct(wall, 90),
            "errors": sum(len(r.errors) for r in results),
            "texts": [r.transcript for r in results]}


def slow_reader(args: argparse.Namespace) -> None:
    runs = [slow_reader_run(args, 0, True), slow_reader_run(args, args.readers, True),
            slow_reader_run(args, args.readers, False)]
    print(f"\nslow readers: tiny.en, {args.workers} workers, {args.clients} normal clients streaming "
          f"{args.seconds:g} s "
          f"at real-time pace; non-readers send up to {args.most_updates} session.update each, read nothing\n")
    print("| run | RSS MB, server process: idle / max / end | RSS MB, with workers: idle / max / end | "
          "non-readers closed client_too_slow (/metrics) | s until only the normal sessions were open | "
          "updates each non-reader sent | normal clients' wall latency mean / p90 s | their errors | "
          "transcripts as the baseline |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        name = ("baseline (no non-readers)" if not run["readers"] else
                f"{run['readers']} non-readers, bound 1024 KiB (default)" if run["bound"] else
                f"{run['readers']} non-readers, no bound (--max-outbound-kb 0)")
        sent = ", ".join(str(o.sent) for o in run["outs"]) or "-"
        same = sum(a == b for a, b in zip(run["texts"], runs[0]["texts"]))
        print(f"| {name} | {run['own_idle']:.0f} / {run['own_max']:.0f} / {run['own_end']:.0f} | "
              f"{run['idle_rss']:.0f} / {run['max_rss']:.0f} / {run['end_rss']:.0f} | {run['too_slow']:.0f} | "
              f"{run['freed']:.1f} | {sent} | {run['wall_mean']:.2f} / {run['wall_p90']:.2f} | {run['errors']} | "
              f"{same}/{len(run['texts'])} |")


# ---------------------------------------------------------------------------- SIGTERM

@dataclass
class Live:
    turns: bool
    items: list[str] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)  # item id -> completed / failed
    code: int | None = None
    reason: str = ""
    closed_at: float = float("nan")
    errors: list[str] = field(default_factory=list)


async def live_session(url: str, r: Result, s: Live) -> None:
    import websockets

    async with websockets.connect(url, max_size=None, close_timeout=5) as ws:
        await ws.send(json.dumps(session_update(RATE, turns=s.turns)))

        async def receive() -> None:
            async for message in ws:
                ev = json.loads(message)
                kind = ev["type"]
                if kind in ("input_audio_buffer.committed", "input_audio_buffer.speech_started"):
                    if ev["item_id"] not in s.items:
                        s.items.append(ev["item_id"])
                elif kind in (COMPLETED, FAILED):
                    s.ended[ev["item_id"]] = "completed" if kind == COMPLETED else "failed"
                elif kind == "error":
                    s.errors.append(ev["error"]["code"])

        receiver = asyncio.create_task(receive())
        t0 = time.perf_counter()
        try:
            for i in range(0, len(r.pcm), BLOCK):
                ahead = t0 + i / RATE - time.perf_counter()
                if ahead > 0:
                    await asyncio.sleep(ahead)
                await ws.send(json.dumps(append_event(r.pcm[i:i + BLOCK])))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        except websockets.ConnectionClosed:
            pass
        try:
            await asyncio.wait_for(receiver, timeout=120)
        except (websockets.ConnectionClosed, asyncio.TimeoutError):
            pass
        s.code, s.reason = ws.close_code, ws.close_reason or ""
        s.closed_at = time.perf_counter()


def sigterm(args: argparse.Namespace) -> None:
    results = chosen_audio(args, args.clients)
    log = Path(tempfile.gettempdir()) / "susurrus-endings-server.log"
    server, port = start_server(args, "--drain-s", str(args.drain_s), "--max-buffered-s", "600", log=log)
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    lives = [Live(turns=k % 2 == 0) for k in range(args.clients)]
    sent_at = [0.0]
    exited = [float("nan")]

    async def everyone() -> None:
        async def stopper() -> None:
            await asyncio.sleep(args.sigterm_after_s)
            sent_at[0] = time.perf_counter()
            server.send_signal(signal.SIGTERM)
            await asyncio.to_thread(server.wait, args.drain_s + 60)
            exited[0] = time.perf_counter() - sent_at[0]

        stop = asyncio.create_task(stopper())
        await asyncio.gather(*(live_session(url, r, s) for r, s in zip(results, lives)))
        await stop

    try:
        asyncio.run(everyone())
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    found = re.search(r"drained in ([\d.]+) s; audio accepted ([\d.]+) s, transcribed ([\d.]+) s, dropped ([\d.]+) s "
                      r"\(([^)]*)\)", text)
    print(f"\nSIGTERM {args.sigterm_after_s:g} s into {args.clients} live sessions (tiny.en, {args.workers} workers, "
          f"--drain-s {args.drain_s:g}; every other session with server turn detection)\n")
    print("| session | turns | items | completed | failed | neither | close code (reason) | s from SIGTERM to close |")
    print("|---|---|---|---|---|---|---|---|")
    open_items = 0
    for k, s in enumerate(lives):
        done = sum(v == "completed" for v in s.ended.values())
        failed = sum(v == "failed" for v in s.ended.values())
        neither = [i for i in s.items if i not in s.ended]
        open_items += len(neither)
        print(f"| {k} | {'server_vad' if s.turns else 'commit'} | {len(s.items)} | {done} | {failed} | "
              f"{len(neither)} | "
              f"{s.code} ({s.reason}) | {s.closed_at - sent_at[0]:.1f} |")
    print(f"\nitems neither completed nor failed: {open_items}; server exit {exited[0]:.1f} s after SIGTERM "
          f"(exit status {server.returncode}; the deadline --drain-s {args.drain_s:g} s)")
    if found:
        drained, accepted, transcribed, dropped, why = found.groups()
        print(f"server's last log line: drained in {drained} s; audio accepted {accepted} s = transcribed "
              f"{transcribed} s + dropped {dropped} s ({why}); off by "
              f"{float(accepted) - float(transcribed) - float(dropped):+.3f} s")
    else:
        print(f"no drain line in the server's log ({log})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["slow-reader", "sigterm"])
    ap.add_argument("--clients", type=int, default=8, help="normal / live sessions (default: %(default)s)")
    ap.add_argument("--readers", type=int, default=4, help="clients that never read (default: %(default)s)")
    ap.add_argument("--most-updates", type=int, default=200_000,
                    help="session.update messages a non-reader sends at most (default: %(default)s: ~100 MB of "
                         "answers)")
    ap.add_argument("--seconds", type=float, default=30.0, help="audio per session, dev recordings back to back")
    ap.add_argument("--sigterm-after-s", type=float, default=15.0)
    ap.add_argument("--drain-s", type=float, default=30.0, help="the server's --drain-s (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", default=str(SHARED_DATA / "dev"))
    args = ap.parse_args()
    if not Path(args.data).is_dir():
        raise SystemExit(f"{args.data}: no speech data (see ../shared/data/README.md)")
    slow_reader(args) if args.scenario == "slow-reader" else sigterm(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
