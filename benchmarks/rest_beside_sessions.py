"""REST beside live sessions: a default ``susurrus serve`` (a subprocess) carries N realtime
sessions streaming English dev recordings at real-time pace (``server_concurrency.run_client``)
while the official OpenAI SDK, with its default 600 s timeout, sends (1) a ~60 s upload with
``stream=True`` (time of the first delta and of ``done``) and then (2) a long file
non-streamed (whole recordings back to back: the long-form ones, then dev items, at least 10
minutes by default): its wall time against the SDK's timeout, and its WER against the joined
references. The sessions' per-word latency says whether they kept real time meanwhile.

    python benchmarks/rest_beside_sessions.py                      # 8 sessions, 600 s upload
    python benchmarks/rest_beside_sessions.py --sessions 0         # the same uploads alone
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import launch  # noqa: E402 - benchmarks/launch.py
from server_concurrency import chosen_audio, pct, run_client  # noqa: E402

from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate  # noqa: E402


def long_file(seconds: float, folder: Path) -> tuple[Path, str]:
    """Whole recordings back to back, as many as fit in ``seconds`` (the server's default upload
    bound is 600 s): the long-form ones, then English dev items: a 16 kHz WAV and its reference."""
    dev = [i for i in read_manifest(SHARED_DATA / "dev") if i.language == "en"]
    items = read_manifest(SHARED_DATA / "longform") + dev
    parts, texts, total = [], [], 0.0
    for item in items:
        audio = decode_audio(item.audio)
        if total + len(audio) / 16000 + 0.5 > seconds:
            continue
        parts += [audio, np.zeros(8000, np.float32)]
        texts.append(item.text)
        total += len(audio) / 16000 + 0.5
    path = folder / "long.wav"
    sf.write(path, np.concatenate(parts), 16000)
    return path, " ".join(texts)


def uploads(url: str, short: Path, long: Path, reference: str) -> dict:
    from openai import OpenAI

    client = OpenAI(api_key="any", base_url=f"{url}/v1")  # the SDK's default timeout (600 s)
    out: dict = {"phases": [("stream=True", time.perf_counter())]}
    t0 = time.monotonic()
    with open(short, "rb") as f:
        for event in client.audio.transcriptions.create(model="whisper-1", file=f, stream=True):
            if event.type == "transcript.text.delta":
                out.setdefault("first_delta_s", time.monotonic() - t0)
    out["stream_done_s"] = time.monotonic() - t0
    out["phases"].append(("non-streamed", time.perf_counter()))
    t0 = time.monotonic()
    with open(long, "rb") as f:
        text = client.audio.transcriptions.create(model="whisper-1", file=f).text
    out["long_s"] = time.monotonic() - t0
    out["phases"].append(("end", time.perf_counter()))
    out["long_wer"] = corpus_error_rate([(reference, text)])
    out["long_words"] = len(text.split())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=8, help="realtime sessions beside the uploads (default: 8)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--long-s", type=float, default=600.0, help="the non-streamed upload's length (default: 600)")
    ap.add_argument("--short-s", type=float, default=61.3, help="the stream=True upload's length (default: 61.3)")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rest_beside_"))
    long, reference = long_file(args.long_s, folder)
    short = folder / "short.wav"
    sf.write(short, sf.read(long)[0][: int(args.short_s * 16000)], 16000)
    # the sessions stream long enough to cover both uploads (they are cut off once those are done)
    sessions = chosen_audio(Namespace(data=str(SHARED_DATA / "dev"), seconds=args.long_s * 1.5), args.sessions)
    server, port = launch.start_server(["--model", args.model, "--log-level", "warning"])
    try:
        url = f"http://127.0.0.1:{port}"

        async def run() -> dict:
            start_at = time.perf_counter() + 0.5
            live = [asyncio.create_task(run_client(f"ws://127.0.0.1:{port}/v1/realtime", r, start_at + 0.5 * k))
                    for k, r in enumerate(sessions)]
            await asyncio.sleep(5.0 + 0.5 * len(sessions))  # every session streaming
            alone_from = time.perf_counter()
            await asyncio.sleep(20.0 if sessions else 0.0)  # the sessions alone, for comparison
            result = await asyncio.to_thread(uploads, url, short, long, reference)
            result["phases"].insert(0, ("sessions alone", alone_from))
            for task in live:
                task.cancel()
            await asyncio.gather(*live, return_exceptions=True)
            return result

        result = asyncio.run(run())
    finally:
        server.terminate()
        server.wait(timeout=30)
    lat = [x for r in sessions for x in r.wall_latency]
    errors = [e for r in sessions for e in r.errors]
    print(f"\n{args.model}, default `susurrus serve`, {args.sessions} realtime sessions beside the uploads "
          f"({len(lat)} words delivered meanwhile; per-word wall latency p50 {pct(lat, 50):.2f} s, "
          f"p95 {pct(lat, 95):.2f} s; errors: {errors or 'none'})\n" if lat else
          f"\n{args.model}, default `susurrus serve`, no sessions beside the uploads\n")
    if lat:  # the sessions' words by when they arrived: alone, then beside each upload
        print("| sessions' words arriving | words | wall latency p50 s | p95 s |")
        print("|---|---|---|---|")
        phases = result["phases"]
        for (name, a), (_, b) in zip(phases, phases[1:]):
            during = [x for r in sessions for x, t in zip(r.wall_latency, r.arrived_at) if a <= t < b]
            if during:
                print(f"| {name} ({b - a:.0f} s) | {len(during)} | {pct(during, 50):.2f} | {pct(during, 95):.2f} |")
        print()
    print("| upload | seconds of audio | first delta s | done s | WER % vs reference | words |")
    print("|---|---|---|---|---|---|")
    print(f"| stream=True | {args.short_s:.1f} | {result['first_delta_s']:.2f} | {result['stream_done_s']:.1f} | | |")
    print(f"| non-streamed json | {sf.info(long).duration:.0f} | | {result['long_s']:.1f} (SDK timeout 600) | "
          f"{result['long_wer']:.2f} | "
          f"{result['long_words']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
