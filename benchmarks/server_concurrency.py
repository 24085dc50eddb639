"""Concurrent sessions on the realtime server: N clients stream N different dev recordings at
real-time pace at the same time (OpenAI Realtime protocol, 24 kHz PCM16, 100 ms appends,
client commit at the end).

Per file: WER against the reference transcript and against ``model.stream()`` on the same
samples (simulated offline, i.e. what ``susurrus stream`` gives), whether the text is identical,
per-word latency (wall clock from sending the append that holds the word's end to receiving its
delta; and the algorithmic latency ``emitted_at - end`` from the ``susurrus.words`` events), and
the lag from the commit to the completed transcript. Overall: the CPU time of the server and its
worker processes per second of audio.

    python benchmarks/server_concurrency.py --clients 8              # one worker process per core
    python benchmarks/server_concurrency.py --clients 8 --workers 0  # in-process threads (before)

With ``--seconds S`` every client streams English dev recordings back to back (each client
starting at another one, half a second apart) for at least S seconds, so that N clients are
N concurrent sessions for the whole run; with several counts (``--clients 1,8,16,32,48``) one
summary row per count is printed, and ``--compare`` runs each count on the unbatched engine
too (``susurrus serve --no-batching``)::

    python benchmarks/server_concurrency.py --clients 1,8,16,24,32,40,48 --seconds 40 --compare
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import launch  # noqa: E402 - benchmarks/launch.py

from susurrus.audio.io import decode_audio, resample  # noqa: E402
from susurrus.audio.resampler import StreamResampler  # noqa: E402
from susurrus.client import append_event, session_update, to_pcm16  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate  # noqa: E402

FILES = ["ljspeech_LJ001-0001", "librispeech_test-clean_1089-134686-0000", "jfk_inaugural",
         "librivox_sense_and_sensibility_01_austen_64kb-0870", "librispeech_dev-clean_1272-128104-0000",
         "ljspeech_LJ050-0131", "librispeech_test-clean_1089-134691-0001", "cmu_goforward",
         "ljspeech_LJ001-0003", "ljspeech_LJ001-0005", "librivox_sense_and_sensibility_01_austen_64kb-0890",
         "ljspeech_LJ001-0007"]
RATE = 24000
BLOCK = RATE // 10
SETTINGS: dict[str, int] = {}  # the sessions' stream settings (``--chunk-ms``), also for model.stream


@dataclass
class Result:
    id: str
    duration: float
    reference: str
    pcm: np.ndarray
    transcript: str = ""
    sent: list[tuple[float, float]] = field(default_factory=list)  # (audio end of append, wall time sent)
    wall_latency: list[float] = field(default_factory=list)
    arrived_at: list[float] = field(default_factory=list)  # perf_counter when each word arrived
    word_ends: list[float] = field(default_factory=list)
    algo_latency: list[float] = field(default_factory=list)
    commit_lag: float = 0.0
    errors: list[str] = field(default_factory=list)
    failed: str = ""  # why no completed transcript came (a failed event, a closed connection, a time limit)


async def run_client(url: str, r: Result, start_at: float) -> None:
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        update = session_update(RATE)
        if SETTINGS:
            update["session"]["susurrus"] = dict(SETTINGS)
        await ws.send(json.dumps(update))
        committed_at = 0.0

        async def receive() -> None:
            pending_delta = None
            async for message in ws:
                now = time.perf_counter()
                ev = json.loads(message)
                kind = ev["type"]
                if kind == "conversation.item.input_audio_transcription.delta":
                    pending_delta = now
                elif kind == "susurrus.words":
                    arrived = pending_delta or now
                    for w in ev["words"]:
                        r.algo_latency.append(w["emitted_at"] - w["end"])
                        r.word_ends.append(w["end"])
                        sent = next((t for end, t in r.sent if end >= w["end"] - 1e-6), None)
                        if sent is None:  # the word ends in audio sent with the commit
                            sent = committed_at
                        r.wall_latency.append(arrived - sent)
                        r.arrived_at.append(arrived)
                elif kind == "conversation.item.input_audio_transcription.completed":
                    r.transcript = ev["transcript"]
                    r.commit_lag = now - committed_at
                    return
                elif kind == "conversation.item.input_audio_transcription.failed":
                    error = ev.get("error") or {}
                    r.errors.append(error.get("code", "transcription_failed"))
                    r.failed = str(error.get("message") or kind)
                    return
                elif kind == "error":
                    r.errors.append(ev["error"]["code"])
            r.failed = r.failed or "the server closed the connection before the transcript completed"

        receiver = asyncio.create_task(receive())
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        t0 = time.perf_counter()
        for i in range(0, len(r.pcm), BLOCK):
            if receiver.done():  # the item failed, or the server closed the connection
                break
            ahead = t0 + i / RATE - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
            block = r.pcm[i:i + BLOCK]
            await ws.send(json.dumps(append_event(block)))
            r.sent.append(((i + len(block)) / RATE, time.perf_counter()))
        if not receiver.done():
            committed_at = time.perf_counter()
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        await receiver


async def run_client_within(url: str, r: Result, start_at: float, limit_s: float) -> None:
    """``run_client`` that gives up ``limit_s`` after its audio would have ended, and that
    records why it got no transcript (``r.failed``) instead of raising."""
    try:
        await asyncio.wait_for(run_client(url, r, start_at), start_at - time.perf_counter() + r.duration + limit_s)
    except asyncio.TimeoutError:
        r.failed = f"no completed transcript {limit_s:.0f} s after the audio ended"
    except Exception as err:  # noqa: BLE001 - a refused or dropped connection: this client failed
        r.failed = f"{type(err).__name__}: {err}"[:200]


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def server_cpu_seconds(pid: int, own: bool = False) -> float:
    """CPU seconds of the server process and its descendants (the worker processes); ``own``:
    of the server process alone."""
    total = 0.0
    for p in [pid] if own else [pid, *_descendants(pid)]:
        try:
            f = _stat(p)
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


def server_rss_mb(pid: int) -> float:
    """Resident memory (MB) of the server process and its descendants."""
    total = 0.0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def _descendants(pid: int) -> list[int]:
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, grew = {pid}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return sorted(tree - {pid})


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def chosen_audio(args: argparse.Namespace, n: int) -> list[Result]:
    """The clients' audio: one benchmark file each, or (``--seconds``) dev recordings back to back."""
    items = read_manifest(args.data)
    if not args.seconds:
        by_id = {i.id: i for i in items}
        chosen = [by_id[f] for f in FILES if f in by_id][:n]
        if len(chosen) < n:
            raise SystemExit(f"only {len(chosen)} of the benchmark files are in {args.data}")
        results = []
        for item in chosen:
            audio = decode_audio(item.audio)
            results.append(Result(item.id, len(audio) / 16000, item.text, to_pcm16(resample(audio, 16000, RATE))))
        return results
    english = [i for i in items if i.language == "en"]
    gap = np.zeros(8000, np.float32)
    results = []
    for k in range(n):
        parts, texts, total, j = [], [], 0.0, k
        while total < args.seconds:
            item = english[j % len(english)]
            audio = decode_audio(item.audio)
            parts += [audio, gap]
            texts.append(item.text)
            total += (len(audio) + len(gap)) / 16000
            j += 1
        audio = np.concatenate(parts)
        results.append(Result(f"client{k:02d}+{english[k % len(english)].id}", len(audio) / 16000, " ".join(texts),
                              to_pcm16(resample(audio, 16000, RATE))))
    return results


def serve_and_stream(args: argparse.Namespace, results: list[Result], batched: bool, window_ms: float = 0.0,
                     grid_ms: float = 0.0, client_limit_s: float | None = None, start_timeout_s: float = 300.0,
                     log: IO | None = None) -> dict:
    """Start ``susurrus serve``, stream every client at once, stop it; CPU, wall and RSS.
    ``client_limit_s``: each client gives up that long after its audio ended and says why in
    ``Result.failed`` (else a client waits for its transcript as long as it takes);
    ``start_timeout_s``: how long the server may take to answer /healthz; ``log``: a file for the
    server's output (else it shares this process's)."""
    port = launch.free_port()
    cmd = [sys.executable, "-m", "susurrus", "serve", "--port", str(port), "--model", args.model,
           "--threads", str(args.threads), "--max-buffered-s", "600", "--max-sessions", str(len(results)),
           "--log-level", "warning", "--workers", str(args.workers), "--compute-type", args.compute_type]
    cmd += ["--device", args.device] if getattr(args, "device", "auto") != "auto" else []
    cmd += ["--ws-compression"] if args.ws_compression else []
    if not batched:
        cmd.append("--no-batching")
    else:
        cmd += ["--batch-window-ms", str(window_ms)] if window_ms else []
        cmd += ["--step-grid-ms", str(grid_ms)] if grid_ms else []
    server = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT if log is not None else None)
    rss = [0.0]
    try:
        launch.wait_healthy(server, port, start_timeout_s)
        idle_rss = server_rss_mb(server.pid)
        cpu0, own0 = server_cpu_seconds(server.pid), server_cpu_seconds(server.pid, own=True)
        clients0 = time.process_time()  # this process: the clients, on the same cores as the server
        wall0 = time.perf_counter()
        url = f"ws://127.0.0.1:{port}/v1/realtime"

        async def everyone() -> None:
            async def sample() -> None:
                while True:
                    rss[0] = max(rss[0], server_rss_mb(server.pid))
                    await asyncio.sleep(2.0)

            sampler = asyncio.create_task(sample())
            start_at = time.perf_counter() + 0.5
            # --stagger-s: clients start at random times, as users connect (the same times every run)
            late = np.random.default_rng(0).uniform(0.0, args.stagger_s, len(results))
            if client_limit_s is None:
                await asyncio.gather(*(run_client(url, r, start_at + d) for r, d in zip(results, late)))
            else:
                await asyncio.gather(*(run_client_within(url, r, start_at + d, client_limit_s)
                                       for r, d in zip(results, late)))
            sampler.cancel()

        asyncio.run(everyone())
        wall = time.perf_counter() - wall0
        clients = time.process_time() - clients0
        cpu = server_cpu_seconds(server.pid) - cpu0
        own = server_cpu_seconds(server.pid, own=True) - own0
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return {"cpu": cpu, "own": own, "wall": wall, "rss": rss[0], "idle_rss": idle_rss, "clients": clients}


_ALONE: dict[str, str] = {}


def stream_alone(model, r: Result) -> str:
    """``model.stream()`` on the samples the server got (what ``susurrus stream`` prints); kept
    per client for the next run of the sweep."""
    if r.id in _ALONE:
        return _ALONE[r.id]
    x = r.pcm.astype(np.float32) / 32768.0
    rs = StreamResampler(RATE, 16000)
    samples = np.concatenate([rs.process(x), rs.flush()])
    stream = model.stream(**SETTINGS)
    block = stream.config.chunk_ms * 16
    for i in range(0, len(samples), block):
        stream.feed(samples[i:i + block])
    stream.finish()
    _ALONE[r.id] = stream.text.strip()
    return _ALONE[r.id]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="8", help="concurrent clients; several counts comma-separated: a sweep")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--compute-type", default="auto", help="the server's --compute-type (default: %(default)s)")
    ap.add_argument("--device", default="auto", help="the server's --device (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per worker process (or in the server with --workers 0) "
                         "(default: %(default)s)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="server worker processes; 0: the server's own threads (default: CPU count, %(default)s)")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="each client streams dev recordings back to back for at least this long (default: one "
                         "benchmark file each)")
    ap.add_argument("--no-batching", action="store_true", help="the server steps its streams one at a time")
    ap.add_argument("--compare", action="store_true", help="each count on the unbatched engine too")
    ap.add_argument("--windows", default="0",
                    help="the batched server's --batch-window-ms, several comma-separated: each count with each "
                         "(default: %(default)s)")
    ap.add_argument("--stagger-s", type=float, default=0.0,
                    help="client k starts a random 0 to this many seconds late (the same draws every run), as "
                         "users connect at their own times; 0: all at once (default: %(default)s)")
    ap.add_argument("--grids", default="0",
                    help="the batched server's --step-grid-ms, several comma-separated: each count with each "
                         "(default: %(default)s)")
    ap.add_argument("--chunk-ms", type=int, default=None,
                    help="the sessions' audio per step (the session's susurrus.chunk_ms; default: the preset's, "
                         "640): a longer step costs less per audio-second and adds to the latency")
    ap.add_argument("--ws-compression", action="store_true",
                    help="start the server with --ws-compression (the clients offer permessage-deflate, as the "
                         "websockets library does by default)")
    ap.add_argument("--data", default=str(SHARED_DATA / "dev"))
    args = ap.parse_args()
    if args.chunk_ms:
        SETTINGS["chunk_ms"] = args.chunk_ms
    counts = [int(c) for c in str(args.clients).split(",")]

    import torch

    import susurrus

    torch.set_num_threads(args.threads)
    model = susurrus.load_model(args.model, compute_type=args.compute_type, device=args.device)
    windows = [float(w) for w in str(args.windows).split(",")]
    grids = [float(g) for g in str(args.grids).split(",")]
    engines = ([(False, 0.0, 0.0)] if args.compare or args.no_batching else []) + (
        [] if args.no_batching else [(True, w, g) for w in windows for g in grids])
    if len(counts) > 1 or len(engines) > 1:
        sweep(args, model, counts, engines)
        return 0
    results = chosen_audio(args, counts[0])
    run = serve_and_stream(args, results, *engines[0])
    per_file_table(args, model, results, run, engines[0][0])
    return 0


def summary(model, results: list[Result], run: dict) -> dict:
    wall_all = [x for r in results for x in r.wall_latency]
    first = [lat for r in results for lat, end in zip(r.wall_latency, r.word_ends) if end < r.duration / 2]
    second = [lat for r in results for lat, end in zip(r.wall_latency, r.word_ends) if end >= r.duration / 2]
    growth = max((np.mean([lat for lat, e in zip(r.wall_latency, r.word_ends) if e >= r.duration / 2] or [0])
                  - np.mean([lat for lat, e in zip(r.wall_latency, r.word_ends) if e < r.duration / 2] or [0]))
                 for r in results)
    alone = [stream_alone(model, r) for r in results]
    audio = sum(r.duration for r in results)
    each = [np.mean(r.wall_latency) for r in results if r.wall_latency]
    return {"spread": (min(each), max(each)) if each else (float("nan"),) * 2,
            "mean": np.mean(wall_all), "p90": pct(wall_all, 90), "first": np.mean(first), "second": np.mean(second),
            "growth": growth, "same": sum(a == r.transcript for a, r in zip(alone, results)),
            "wer_ref": corpus_error_rate([(r.reference, r.transcript) for r in results]),
            "wer_stream": corpus_error_rate([(a, r.transcript) for a, r in zip(alone, results)]),
            "lag": max(r.commit_lag for r in results), "errors": sum(len(r.errors) for r in results),
            "cores": run["cpu"] / run["wall"], "client_cores": run["clients"] / run["wall"],
            "cost": run["cpu"] / audio, "own": run["own"] / audio, "rss": run["rss"],
            "idle_rss": run["idle_rss"], "audio": audio}


def sweep(args: argparse.Namespace, model, counts: list[int], engines: list[tuple[bool, float, float]]) -> None:
    print(f"\n{args.model} ({model.compute_type}), concurrent sessions at real-time pace, 24 kHz PCM16 in 100 ms "
          "appends, each client "
          f"{'one file' if not args.seconds else f'{args.seconds:.0f}+ s of dev recordings back to back'}"
          f"{f', starting 0-{args.stagger_s:g} s apart' if args.stagger_s else ', starting together'}; server: "
          f"{args.workers} worker processes, {args.threads} torch thread(s) each, {os.cpu_count()} cores"
          f"{f'; sessions stepping every {args.chunk_ms} ms' if args.chunk_ms else ''}\n")
    print("| engine | clients | wall latency mean / p90 s | sessions' own means min–max s | 1st / 2nd half s | "
          "worst growth s | same text as model.stream | WER vs ref % | WER vs model.stream % | commit → completed "
          "max s | cores busy (the clients' process) | core-s per audio-s (server process alone) | "
          "RSS MB (idle → peak) | errors |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|")
    for n in counts:
        for batched, window, grid in engines:
            results = chosen_audio(args, n)
            row = summary(model, results, serve_and_stream(args, results, batched, window, grid))
            name = "one at a time" if not batched else ", ".join(
                ["batched"] + ([f"window {window:g} ms"] if window else []) + ([f"grid {grid:g} ms"] if grid else []))
            print(f"| {name} | {n} | {row['mean']:.2f} / {row['p90']:.2f} | "
                  f"{row['spread'][0]:.2f}–{row['spread'][1]:.2f} | "
                  f"{row['first']:.2f} / {row['second']:.2f} | {row['growth']:+.2f} | {row['same']}/{n} | "
                  f"{row['wer_ref']:.2f} | {row['wer_stream']:.2f} | {row['lag']:.2f} | {row['cores']:.2f} "
                  f"({row['client_cores']:.2f}) | "
                  f"{row['cost']:.3f} ({row['own']:.3f}) | {row['idle_rss']:.0f} → {row['rss']:.0f} | "
                  f"{row['errors']} |", flush=True)


def per_file_table(args: argparse.Namespace, model, results: list[Result], run: dict, batched: bool) -> None:
    cpu, wall = run["cpu"], run["wall"]
    audio_total = sum(r.duration for r in results)
    print(f"\n{args.model} ({model.compute_type}), {len(results)} concurrent sessions at real-time pace, 24 kHz PCM16 "
          "in 100 ms appends; "
          f"server: {f'{args.workers} worker processes' if args.workers else 'in-process threads'} "
          f"({'batched' if batched else 'one stream at a time'}), "
          f"{args.threads} torch thread(s) each, {os.cpu_count()} cores\n")
    print("| file | audio s | WER vs ref % | WER vs model.stream % | same text | words | wall latency mean / p50 / "
          "p90 s | wall latency 1st / 2nd half s | algorithmic mean / p90 s | commit → completed s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    all_wall, all_algo, first_half, second_half = [], [], [], []
    pairs_ref, pairs_stream, same = [], [], 0
    for r in results:
        offline = stream_alone(model, r)
        same += offline == r.transcript
        pairs_ref.append((r.reference, r.transcript))
        pairs_stream.append((offline, r.transcript))
        all_wall += r.wall_latency
        all_algo += r.algo_latency
        early = [lat for lat, end in zip(r.wall_latency, r.word_ends) if end < r.duration / 2]
        late = [lat for lat, end in zip(r.wall_latency, r.word_ends) if end >= r.duration / 2]
        first_half += early
        second_half += late
        print(f"| {r.id} | {r.duration:.1f} | {corpus_error_rate([(r.reference, r.transcript)]):.1f} | "
              f"{corpus_error_rate([(offline, r.transcript)]):.1f} | {'yes' if offline == r.transcript else 'no'} | "
              f"{len(r.wall_latency)} | {np.mean(r.wall_latency):.2f} / {pct(r.wall_latency, 50):.2f} / "
              f"{pct(r.wall_latency, 90):.2f} | {np.mean(early):.2f} / {np.mean(late):.2f} | "
              f"{np.mean(r.algo_latency):.2f} / {pct(r.algo_latency, 90):.2f} | {r.commit_lag:.2f} |"
              + (f" errors: {r.errors}" if r.errors else ""))
    print(f"| **all** | {audio_total:.1f} | {corpus_error_rate(pairs_ref):.1f} | "
          f"{corpus_error_rate(pairs_stream):.1f} | "
          f"{same}/{len(results)} | {len(all_wall)} | {np.mean(all_wall):.2f} / {pct(all_wall, 50):.2f} / "
          f"{pct(all_wall, 90):.2f} | {np.mean(first_half):.2f} / {np.mean(second_half):.2f} | "
          f"{np.mean(all_algo):.2f} / {pct(all_algo, 90):.2f} | {max(r.commit_lag for r in results):.2f} (max) |")
    print(f"\nserver CPU (with its workers) {cpu:.1f} s for {audio_total:.1f} s of audio: "
          f"{cpu / audio_total:.3f} core-s per audio-s, "
          f"{cpu / wall:.2f} cores busy on average (the clients' process {run['clients'] / wall:.2f}); "
          f"wall {wall:.1f} s for streams of at most "
          f"{max(r.duration for r in results):.1f} s; server RSS {run['idle_rss']:.0f} MB idle, "
          f"{run['rss']:.0f} MB at most")


if __name__ == "__main__":
    sys.exit(main())
