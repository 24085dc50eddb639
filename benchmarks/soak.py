"""Soak test of the realtime server: hours of audio through ``susurrus serve`` with sessions
that come and go, sampled over time for leaks, drift, loops and lost audio.

The real server runs as a subprocess on a loopback port (tiny.en, ``--workers`` processes).
``--sessions`` client slots each loop until ``--audio-hours`` of audio have been appended in all:
connect, ``session.update`` (server turn detection, ``server_vad``, for ``--turns-share`` of the
sessions), stream random-length pieces of the long-form and dev recordings with silences of
random length between them (24 kHz PCM16 appends, paced at ``--speed`` times real time; the
server's flow control may slow them down), then end: commit and wait for the transcript, then
close (a clean end), close mid-stream without a commit, or drop the TCP connection mid-stream
without a close (abrupt); then connect again. Sessions without turn detection also commit at
some pauses (several items per session). Each slot's plan (its sessions, recordings, pauses,
commits and endings) starts over every table period's share of its audio (an hour / ``--sessions``;
the session crossing that mark is cut there), so every period carries the same work and what moves
from one period to the next is the server, not the draw of recordings and pauses (``--fresh-plans``
draws new ones: more distinct speech for the loop check, a per-step cost that moves with the mix).

Every ``--sample-s`` seconds: RSS of the server and its worker processes (psutil, else /proc),
``/metrics`` (open-sessions gauge, accepted / transcribed / dropped audio seconds, compute
seconds), and the latency of the words committed since the last sample (algorithmic:
``emitted_at - end`` of the ``susurrus.words`` events, in audio seconds; wall: from sending the
append holding a word's end to receiving it). At the end: a table per hour of audio the server
finished, transcribed or dropped (per quarter of the run when it is under 2 h; clients run up to
``--max-buffered-s`` ahead of it), and the checks: RSS of every period within 10 % of the first,
compute per engine step (``susurrus_compute_seconds_total`` over ``susurrus_steps_total``; compute per
audio second is printed too, but it moves with how much of the audio is pauses) within 10 % of the
first period (and the same over the host's speed, measured beside the server every ``--probe-s`` by
``benchmarks/host_probe.py``: a shared VM's CPU time for the same work moves 10-20 % by the hour),
the open-sessions gauge back to 0, no phrase committed three times in a row in any session
(``longest_repetition`` <= 2), accepted audio = transcribed + dropped (by reason) to the second,
and for a run of 24 h or more at least 500 connects. Writes the samples as JSON (``--json``) and,
with ``--plot``, a PNG of RSS and latency over the run.

    python benchmarks/soak.py --audio-hours 24 --sessions 12 --speed 0.9 --plot docs/soak.png   # the soak
    python benchmarks/soak.py --audio-hours 0.25 --session-s 10,60 --sample-s 5                # a quick check

Pick ``--sessions`` x ``--speed`` well below what the server can do (tiny.en on 2 cores: ~14-16x
real time with 16 sessions; 10 at 0.9x asks 9x): at capacity the backlog comes and goes and moves
the per-step time with it (the 16-session run's hours 7-9), and past it every client sits
``--max-buffered-s`` ahead of the model, its websockets keepalive pings wait behind that audio in
the socket buffers and time out (the client closes, 1011). Fewer sessions do not make up for it
with speed: 8 sessions at 4x ran at ~8x with the cores half idle (a session's work goes to the
model one call at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from soak_clients import RATE, Soak, Source, periods_of, run_slot  # noqa: E402

from susurrus.evaluation.data import SHARED_DATA  # noqa: E402

ACCEPTED = "susurrus_audio_accepted_seconds_total"
TRANSCRIBED = "susurrus_audio_seconds_total"
DROPPED = "susurrus_audio_dropped_seconds_total"
COMPUTE = "susurrus_compute_seconds_total"
STEPS = "susurrus_steps_total"
OPEN = "susurrus_sessions_open"
_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


# ---------------------------------------------------------------------------- pure helpers

def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to ``{name or name{labels}: value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def dropped_by_reason(metrics: dict[str, float]) -> dict[str, float]:
    return {re.search(r'reason="([^"]*)"', k).group(1): v  # type: ignore[union-attr]
            for k, v in metrics.items() if k.startswith(DROPPED + "{")}


def within(values: list[float], tolerance: float) -> bool:
    """Every value within ``tolerance`` (a share) of the first; NaNs are skipped."""
    values = [v for v in values if not math.isnan(v)]
    return bool(values) and all(abs(v - values[0]) <= tolerance * abs(values[0]) for v in values[1:])


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


# ---------------------------------------------------------------------------- the server side

def http_get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def tree_rss(pid: int) -> tuple[float, float, int]:
    """Resident MB of process ``pid`` and its descendants (the workers), of ``pid`` alone, and how
    many processes they are."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return float("nan"), float("nan"), 0
        sizes = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                sizes.append(p.memory_info().rss if p.pid != pid else -p.memory_info().rss)
        own = -sum(x for x in sizes if x < 0)
        return (sum(abs(x) for x in sizes)) / 2**20, own / 2**20, len(procs)
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, grew = {pid}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    total = own = 0
    for p in tree:
        with contextlib.suppress(OSError, IndexError, ValueError):
            size = int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            total += size
            own += size if p == pid else 0
    return total / 2**20, own / 2**20, len(tree)


def sample(soak: Soak, base: str, pid: int, started: float, words_from: int) -> dict[str, Any]:
    m = parse_metrics(http_get(f"{base}/metrics"))
    soak.accepted_s = m.get(ACCEPTED, soak.accepted_s)
    rss, own, procs = tree_rss(pid)
    new = soak.words[words_from:]
    dropped = dropped_by_reason(m)
    algo = [w[1] for w in new]
    wall = [w[2] for w in new if not math.isnan(w[2])]
    return {"wall_s": round(time.perf_counter() - started, 2), "sent_s": round(soak.sent_s, 2),
            "rss_mb": round(rss, 1), "server_rss_mb": round(own, 1), "processes": procs,
            "sessions_open": m.get(OPEN, float("nan")),
            "client_sessions_open": soak.open, "connects": soak.connects,
            "accepted_s": m.get(ACCEPTED, 0.0), "transcribed_s": m.get(TRANSCRIBED, 0.0),
            "dropped_s": dropped, "compute_s": m.get(COMPUTE, 0.0), "steps": m.get(STEPS, 0.0),
            "done_s": round(m.get(TRANSCRIBED, 0.0) + sum(dropped.values()), 3),
            "probes": len(soak.probes),
            "words": len(new), "algo_latency_mean": mean(algo), "algo_latency_p90": pct(algo, 90),
            "wall_latency_mean": mean(wall), "wall_latency_p90": pct(wall, 90)}


def progress(soak: Soak, started: float, rss: float, final: bool = False) -> None:
    frac = min(1.0, soak.sent_s / soak.target_s)
    elapsed = time.perf_counter() - started
    eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
    bar = "#" * int(frac * 30)
    line = (f"[{bar:<30}] {100 * frac:5.1f}% {soak.sent_s / 3600:.3f}/{soak.target_s / 3600:.3f} h audio  "
            f"connects {soak.connects}  open {soak.open}  RSS {rss:.0f} MB  "
            f"{elapsed / 60:.1f} min, ETA {eta / 60:.1f} min")
    print(("\r" if sys.stderr.isatty() else "") + line, end="\n" if final or not sys.stderr.isatty() else "",
          file=sys.stderr, flush=True)


async def soak_run(soak: Soak, base: str, pid: int, samples: list[dict[str, Any]]) -> None:
    a = soak.args
    started = soak.started = time.perf_counter()
    samples.append(await asyncio.to_thread(sample, soak, base, pid, started, 0))
    master = random.Random(a.seed)
    slots = [asyncio.create_task(run_slot(soak, i, master.getrandbits(64))) for i in range(a.sessions)]
    words_from = len(soak.words)
    next_sample = time.perf_counter() + a.sample_s
    next_line = 0.0
    while not all(t.done() for t in slots):
        await asyncio.sleep(0.5)
        now = time.perf_counter()
        if now >= next_sample:
            next_sample = now + a.sample_s
            n = len(soak.words)
            samples.append(await asyncio.to_thread(sample, soak, base, pid, started, words_from))
            words_from = n
        if now >= next_line:
            next_line = now + (1.0 if sys.stderr.isatty() else 60.0)
            progress(soak, started, samples[-1]["rss_mb"])
    for t in slots:
        t.result()  # a slot that crashed fails the run here
    # everyone has gone: the gauge must fall to 0 and the audio balance once the last work is done
    deadline = time.perf_counter() + a.settle_s
    while True:
        last = await asyncio.to_thread(sample, soak, base, pid, started, words_from)
        words_from = len(soak.words)
        balance = last["accepted_s"] - last["transcribed_s"] - sum(last["dropped_s"].values())
        if (last["sessions_open"] == 0 and abs(balance) < 0.005) or time.perf_counter() > deadline:
            break
        await asyncio.sleep(1.0)
    samples.append(last)
    progress(soak, started, last["rss_mb"], final=True)


# ---------------------------------------------------------------------------- the report

def report(soak: Soak, samples: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    total = max(samples[-1]["done_s"], 1e-9)  # audio the server finished (transcribed or dropped)
    period = periods_of(soak.target_s)
    n_periods = max(1, math.ceil(min(total, soak.target_s) / period - 1e-6))
    unit = "h" if period >= 3600 else "min"
    scale = 3600 if unit == "h" else 60
    rows = []
    prev = samples[0]
    running = samples[1:-1] or samples[1:]
    for k in range(n_periods):
        lo, hi = k * period, (k + 1) * period if k < n_periods - 1 else math.inf  # the last: to the end
        inside = [x for x in running if lo < x["done_s"] <= hi + 1e-6]
        if not inside:
            continue
        end = inside[-1]
        d_audio = end["transcribed_s"] - prev["transcribed_s"]
        d_compute = end["compute_s"] - prev["compute_s"]
        d_steps = end["steps"] - prev["steps"]
        words = [w for w in soak.words if prev["wall_s"] < w[0] <= end["wall_s"]]
        probes = soak.probes[prev.get("probes", 0):end.get("probes", 0)]
        probe = float(np.median(probes)) if probes else float("nan")
        per_step = 1000 * d_compute / d_steps if d_steps > 0 else float("nan")
        algo = [w[1] for w in words]
        wall = [w[2] for w in words if not math.isnan(w[2])]
        rows.append({"from": lo, "to": min(hi, total), "wall_s": end["wall_s"] - prev["wall_s"],
                     "rss_mb": float(np.median([x["rss_mb"] for x in inside])),
                     "rss_max_mb": max(x["rss_mb"] for x in inside),
                     "server_rss_mb": float(np.median([x["server_rss_mb"] for x in inside])),
                     "sessions_mean": mean([x["sessions_open"] for x in inside]),
                     "sessions_max": max(x["sessions_open"] for x in inside),
                     "connects": end["connects"],
                     "compute_ms_per_s": 1000 * d_compute / d_audio if d_audio > 0 else float("nan"),
                     "steps": d_steps,
                     "compute_ms_per_step": per_step, "probe_ms": probe, "per_step_over_probe": per_step / probe,
                     "words": len(words), "algo_mean": mean(algo), "algo_p90": pct(algo, 90),
                     "wall_mean": mean(wall), "wall_p90": pct(wall, 90)})
        prev = end
    last = samples[-1]
    dropped = last["dropped_s"]
    balance = last["accepted_s"] - last["transcribed_s"] - sum(dropped.values())
    reps = [s.repetition for s in soak.sessions]
    worst = max(soak.sessions, key=lambda s: s.repetition, default=None)
    full = soak.target_s >= 24 * 3600
    peak = max((x["sessions_open"] for x in running), default=0)
    checks = [
        ("server RSS of every period within ±10 % of the first (median MB)",
         " / ".join(f"{r['rss_mb']:.0f}" for r in rows), within([r["rss_mb"] for r in rows], 0.10)),
        ("compute per engine step within ±10 % of the first (ms; /metrics susurrus_compute_seconds_total over "
         "susurrus_steps_total)",
         " / ".join(f"{r['compute_ms_per_step']:.1f}" for r in rows),
         within([r["compute_ms_per_step"] for r in rows], 0.10)),
        ("the same over the host's speed (compute per step / host_probe.py median ms, which moves with the "
         "host alone) within ±10 % of the first",
         " / ".join(f"{r['per_step_over_probe']:.2f}" for r in rows),
         within([r["per_step_over_probe"] for r in rows], 0.10) if soak.probes else None),
        ("open-sessions gauge back to 0 at the end", f"{last['sessions_open']:g}", last["sessions_open"] == 0),
        ("longest repetition in any session's transcript <= 2",
         f"{max(reps, default=0)}" + (f" (session {worst.n})" if worst and worst.repetition > 2 else ""),
         max(reps, default=0) <= 2),
        ("accepted = transcribed + dropped, to the second",
         f"{last['accepted_s']:.1f} = {last['transcribed_s']:.1f} + "
         f"{sum(dropped.values()):.1f} (" + (", ".join(f"{r} {v:.1f}" for r, v in dropped.items() if v) or "none")
         + f"); off by {balance:+.2f} s", abs(balance) < 1.0),
        (f"at least {args.sessions} sessions open at a time (peak of the gauge samples)", f"{peak:g}",
         peak >= args.sessions),
        ("connects >= 500 (the 24-h soak's bar)", f"{soak.connects}", soak.connects >= 500 if full else None),
        ("audio >= 24 h", f"{total / 3600:.2f} h", total >= 24 * 3600 if full else None),
    ]

    def f(x: float, d: int = 2) -> str:
        return "–" if math.isnan(x) else f"{x:.{d}f}"

    print(f"\nsoak: {args.model}, {args.workers} worker process(es), {args.sessions} client slots, appends paced at "
          f"{args.speed:g}x real time, {total / 3600:.3f} h of audio in {(last['wall_s']) / 60:.1f} min of wall time, "
          f"{soak.connects} connects, {os.cpu_count()} cores\n")
    print(f"| audio {unit} done | wall min | RSS MB median (max) | of which server process | open sessions mean (max) "
          "| connects | "
          "compute ms per audio s | steps | compute ms per step | host probe ms | words "
          "| algorithmic latency mean / p90 s | wall latency mean / p90 s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['from'] / scale:.2f}–{r['to'] / scale:.2f} | {r['wall_s'] / 60:.1f} | {r['rss_mb']:.0f} "
              f"({r['rss_max_mb']:.0f}) | {r['server_rss_mb']:.0f} | {f(r['sessions_mean'], 1)} "
              f"({r['sessions_max']:g}) | {r['connects']} | "
              f"{f(r['compute_ms_per_s'], 0)} | {r['steps']:.0f} | {f(r['compute_ms_per_step'], 1)} | "
              f"{f(r['probe_ms'], 2)} | {r['words']} | {f(r['algo_mean'])} / {f(r['algo_p90'])} | "
              f"{f(r['wall_mean'])} / {f(r['wall_p90'])} |")
    ends: dict[str, int] = {}
    for s in soak.sessions:
        ends[s.ended] = ends.get(s.ended, 0) + 1
    errors: dict[str, int] = {}
    for s in soak.sessions:
        for e in s.errors:
            errors[e] = errors.get(e, 0) + 1
    print(f"\nsessions: {len(soak.sessions)} ({sum(s.turns for s in soak.sessions)} with server turn detection); "
          f"endings: " + ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
          + f"; items completed {sum(s.completed for s in soak.sessions)}; client-side errors: "
          + (", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none")
          + f"; server RSS before the first session {samples[0]['rss_mb']:.0f} MB "
            f"({samples[0]['processes']} processes)")
    print("\n| check | measured | pass |\n|---|---|---|")
    for name, value, ok in checks:
        print(f"| {name} | {value} | {'n/a' if ok is None else 'yes' if ok else '**no**'} |")
    return {"rows": rows, "checks": [{"check": c, "measured": v, "pass": ok} for c, v, ok in checks]}


def plot(path: str, samples: list[dict[str, Any]], soak: Soak) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [s["done_s"] / 3600 for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(x, [s["rss_mb"] for s in samples], label="server + workers RSS")
    top.set_ylabel("RSS MB")
    twin = top.twinx()
    twin.plot(x, [s["sessions_open"] for s in samples], color="grey", alpha=0.5, label="open sessions")
    twin.set_ylabel("open sessions")
    top.legend(loc="upper left")
    bottom.plot(x, [s["algo_latency_mean"] for s in samples], label="algorithmic latency mean (audio s)")
    bottom.plot(x, [s["wall_latency_mean"] for s in samples], label="wall latency mean (s)")
    bottom.plot(x, [s["wall_latency_p90"] for s in samples], label="wall latency p90 (s)", alpha=0.6)
    bottom.set_ylabel("s")
    bottom.set_xlabel("hours of audio the server finished (transcribed or dropped)")
    bottom.legend(loc="upper left")
    fig.suptitle(f"soak: {soak.connects} connects, {soak.sent_s / 3600:.2f} h of audio")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def read_probes(probe: subprocess.Popen, into: list[float]) -> None:
    for line in probe.stdout or ():
        with contextlib.suppress(ValueError):
            into.append(float(line))


def pair(text: str) -> tuple[float, float]:
    lo, hi = (float(v) for v in text.split(","))
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: want MIN,MAX with 0 < MIN <= MAX")
    return lo, hi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio-hours", type=float, default=24.0,
                    help="audio to append in all sessions together, in hours (default: %(default)s, the issue's bar)")
    ap.add_argument("--sessions", type=int, default=10, help="client slots streaming at once (default: %(default)s)")
    ap.add_argument("--speed", type=float, default=0.9,
                    help="appends paced at this many times real time per session; the server's flow control may "
                         "slow them further (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="the server's worker processes (default: CPU count, %(default)s)")
    ap.add_argument("--model", default="tiny.en", help="the server's model (default: %(default)s)")
    ap.add_argument("--session-s", type=pair, default=(20.0, 200.0), metavar="MIN,MAX",
                    help="audio per connection, uniform between MIN and MAX seconds (default: 20,200: ~110 s "
                         "mean, ~790 connects in 24 h)")
    ap.add_argument("--piece-s", type=pair, default=(2.0, 30.0), metavar="MIN,MAX",
                    help="length of a speech piece cut from a recording (default: 2,30)")
    ap.add_argument("--pause-s", type=pair, default=(0.1, 8.0), metavar="MIN,MAX",
                    help="silence after each piece, log-uniform (default: 0.1,8)")
    ap.add_argument("--turns-share", type=float, default=0.5,
                    help="share of sessions with server turn detection, server_vad (default: %(default)s)")
    ap.add_argument("--close-share", type=float, default=0.2,
                    help="share of sessions closed mid-stream without a commit (default: %(default)s)")
    ap.add_argument("--abort-share", type=float, default=0.2,
                    help="share of sessions whose TCP connection is dropped mid-stream, without a close "
                         "(default: %(default)s); the rest commit, wait for the transcript and close")
    ap.add_argument("--commit-share", type=float, default=0.3,
                    help="sessions without turn detection commit after this share of the pauses (default: "
                         "%(default)s)")
    ap.add_argument("--block-ms", type=int, default=100, help="audio per append (default: %(default)s)")
    ap.add_argument("--sample-s", type=float, default=30.0,
                    help="wall seconds between samples of RSS, /metrics and latency (default: %(default)s)")
    ap.add_argument("--probe-s", type=float, default=10.0,
                    help="seconds between runs of benchmarks/host_probe.py beside the server, the host's speed for "
                         "the per-step check (0: none; default: %(default)s)")
    ap.add_argument("--finish-timeout-s", type=float, default=300.0,
                    help="how long a clean end waits for the last transcript (default: %(default)s)")
    ap.add_argument("--settle-s", type=float, default=60.0,
                    help="after the last session, how long to wait for the gauge to reach 0 and the audio to "
                         "balance (default: %(default)s)")
    ap.add_argument("--data", nargs="+", default=[str(SHARED_DATA / "longform"), str(SHARED_DATA / "dev")],
                    help="manifest directories to cut the audio from (default: the long-form and dev sets)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh-plans", action="store_true",
                    help="draw new sessions every period instead of repeating each slot's plan: more distinct speech "
                         "for the loop check, but the compute per step then moves with each period's mix")
    ap.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "susurrus-soak.json"),
                    help="write the samples, sessions, table and checks here (default: %(default)s)")
    ap.add_argument("--plot", help="write a PNG of RSS and latency over the run here (docs/soak.png for the soak)")
    ap.add_argument("--server-log", default=str(Path(tempfile.gettempdir()) / "susurrus-soak-server.log"),
                    help="the server's stderr (default: %(default)s)")
    args = ap.parse_args()
    if args.close_share + args.abort_share > 1:
        ap.error("--close-share + --abort-share must be at most 1")

    source = Source(args.data)
    print(f"{len(source.clips)} recordings, {source.seconds / 60:.1f} min of audio to cut from", file=sys.stderr)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    cmd = [sys.executable, "-m", "susurrus", "serve", "--port", str(port), "--model", args.model,
           "--workers", str(args.workers), "--threads", "1", "--max-sessions", str(2 * args.sessions + 4),
           "--overload-lag-s", "0",  # the clients send faster than real time on purpose
           "--log-level", "warning"]
    log = open(args.server_log, "w")  # noqa: SIM115 - open for the server's lifetime
    server = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    soak = Soak(f"ws://127.0.0.1:{port}/v1/realtime", source, args.audio_hours * 3600, args.speed,
                RATE * args.block_ms // 1000, args)
    samples: list[dict[str, Any]] = []
    probe = None
    try:
        for _ in range(3000):
            if server.poll() is not None:
                raise SystemExit(f"the server exited ({server.returncode}); see {args.server_log}")
            try:
                http_get(f"{base}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        if args.probe_s > 0:
            probe = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "host_probe.py"), "--every",
                                      str(args.probe_s)], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=read_probes, args=(probe, soak.probes), daemon=True).start()
        asyncio.run(soak_run(soak, base, server.pid, samples))
    finally:
        if probe is not None:
            probe.kill()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    result = report(soak, samples, args)
    print(f"\nserver exit status after SIGTERM: {server.returncode}; its log: {args.server_log}")
    out = {"args": {k: v for k, v in vars(args).items()}, "samples": samples, **result,
           "sessions": [{k: v for k, v in asdict(s).items() if k not in ("texts", "finals")}
                        | {"transcript": s.transcript()} for s in soak.sessions]}
    Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    print(f"samples: {args.json}")
    if args.plot:
        plot(args.plot, samples, soak)
        print(f"plot: {args.plot}")
    return 0 if all(c["pass"] is not False for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
