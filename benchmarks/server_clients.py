"""Real clients against a real ``susurrus serve`` (a subprocess, 2 workers): the REST API with
the official OpenAI SDK (``stream=True`` on a ~60 s upload: time of the first delta and of
``done``; every response format against ``susurrus transcribe``'s files) and the OpenAI Agents
SDK's streamed session on ``jfk_inaugural.wav`` (server_vad and semantic_vad, sent at once and
at real time: turns, and their joined text against ``susurrus stream``).

    python benchmarks/server_clients.py
    python benchmarks/server_clients.py --model base --port 8799
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import soundfile as sf

DATA = Path(os.environ.get("SUSURRUS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
JFK = DATA / "dev" / "audio" / "jfk_inaugural.wav"
LONGFORM = DATA / "longform" / "audio" / "dev_ljspeech_LJ001-0001_to_0032.wav"
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "susurrus.cli.main", *args], capture_output=True, check=True)


def text_of_stream(path: Path, out: Path) -> str:
    cli("stream", str(path), "--quiet", "-f", "json", "-o", str(out))
    return json.loads((out / f"{path.stem}.json").read_text())["text"].strip()


def rest(client, path: Path, out: Path) -> None:
    t0, first, done, text = time.monotonic(), None, None, ""
    with open(path, "rb") as f:
        for event in client.audio.transcriptions.create(model="whisper-1", file=f, stream=True):
            if event.type == "transcript.text.delta":
                first = first or time.monotonic() - t0
            else:
                done, text = time.monotonic() - t0, event.text
    print(f"REST stream=True, {path.name} ({sf.info(path).duration:.1f} s): first delta {first:.2f} s, "
          f"done {done:.2f} s; text == `susurrus stream`: {text == text_of_stream(path, out)}")
    t0 = time.monotonic()
    with open(path, "rb") as f:
        client.audio.transcriptions.create(model="whisper-1", file=f)
    print(f"  non-streamed json: {time.monotonic() - t0:.2f} s")
    cli("transcribe", str(path), "-f", "all", "-o", str(out), "--quiet")
    files = {fmt: (out / f"{path.stem}.{fmt}").read_text() for fmt in ("txt", "srt", "vtt", "json")}
    cli_json = json.loads(files["json"])
    same = {}
    for fmt in FORMATS:
        with open(path, "rb") as f:
            r = client.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)
        if fmt in ("json", "verbose_json"):
            same[fmt] = r.text == cli_json["text"]
        else:
            same[fmt] = r == files["txt" if fmt == "text" else fmt]
    print(f"  each format == `susurrus transcribe -f ...`: {same}")


def agents(url: str, out: Path) -> None:
    from agents.voice import OpenAISTTModel, StreamedAudioInput, STTModelSettings
    from openai import AsyncOpenAI

    from susurrus.audio.io import decode_audio, resample
    from susurrus.evaluation.metrics import corpus_error_rate

    pcm = (np.clip(resample(decode_audio(JFK), 16000, 24000), -1, 1) * 32767).astype(np.int16)
    reference = text_of_stream(JFK, out)
    print(f"`susurrus stream {JFK.name}`: {reference}")

    async def session(kind: str, realtime: bool) -> tuple[list[str], float]:
        audio = StreamedAudioInput()
        stt = OpenAISTTModel("gpt-4o-transcribe", AsyncOpenAI(api_key="any", base_url=f"{url}/v1"))
        s = await stt.create_session(audio, STTModelSettings(turn_detection={"type": kind}), False, False)

        async def feed() -> None:
            for i in range(0, len(pcm), 2400):
                await audio.add_audio(pcm[i:i + 2400])
                if realtime:
                    await asyncio.sleep(0.1)
            await audio.add_audio(None)

        task, t0 = asyncio.create_task(feed()), time.monotonic()
        turns = [t async for t in s.transcribe_turns()]
        await task
        return turns, time.monotonic() - t0

    for realtime in (False, True):
        for kind in ("server_vad", "semantic_vad"):
            turns, seconds = asyncio.run(session(kind, realtime))
            wer = corpus_error_rate([(reference, " ".join(turns))])
            pace = "real time" if realtime else "at once"
            print(f"Agents SDK {kind}, {pace}: {len(turns)} turns in {seconds:.1f} s, "
                  f"WER of the joined turns against `susurrus stream` {wer:.1f} %: {turns}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--seconds", type=float, default=61.3, help="the long upload: the long-form stream's start")
    args = ap.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen([sys.executable, "-m", "susurrus.cli.main", "serve", "--port", str(args.port),
                               "--workers", "2", "--model", args.model, "--log-level", "warning"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            long = out / f"longform_{args.seconds:g}s.wav"
            audio, rate = sf.read(LONGFORM, dtype="float32")
            sf.write(long, audio[:round(args.seconds * rate)], rate, subtype="PCM_16")
            for _ in range(1200):
                try:
                    urllib.request.urlopen(f"{url}/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; model {args.model}")
            import openai

            client = openai.OpenAI(api_key="any", base_url=f"{url}/v1", max_retries=0, timeout=1200)
            for path in (long, JFK):
                rest(client, path, out)
            agents(url, out)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
