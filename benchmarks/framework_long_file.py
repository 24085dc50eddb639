"""Voice-agent clients on a whole recording: the OpenAI Agents SDK (``OpenAISTTModel`` streamed
session, server_vad), the ``openai`` SDK's Realtime connection (a session that never sets
``turn_detection``: OpenAI's default server VAD) and LiveKit's OpenAI plugin
(``openai.STT(use_realtime=True)``) stream the 5.5-minute long-form file, at once or at
real-time pace (100 ms blocks), against a default ``susurrus serve`` (a subprocess). Several
clients run at once (``--clients``, dealt round-robin over the frameworks). Per client: the
turns' texts joined against ``susurrus stream FILE`` (WER), turns, wall time, and any
disconnect or error. The server's peak RSS is printed too.

    python benchmarks/framework_long_file.py --clients 3 --pace once
    python benchmarks/framework_long_file.py --clients 8 --pace realtime
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import launch  # noqa: E402 - benchmarks/launch.py
from long_file_under_load import FILE, stream_text  # noqa: E402
from server_concurrency import server_rss_mb  # noqa: E402

from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import read_manifest  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate  # noqa: E402

BLOCK = 2400  # 100 ms at 24 kHz
QUIET_S = 30.0  # after the last audio, a client is done once no transcript came for this long


async def paced(pcm: np.ndarray, realtime: bool):
    t0 = time.monotonic()
    for i in range(0, len(pcm), BLOCK):
        if realtime:
            await asyncio.sleep(max(0.0, t0 + i / 24000 - time.monotonic()))
        yield pcm[i:i + BLOCK]


async def until_quiet(next_event: Callable[[], Awaitable[Any]], on_event: Callable[[Any], None],
                      feed: asyncio.Task) -> None:
    """``on_event`` for each event from ``next_event()`` until there are no more, or the feed is
    done and no event came for ``QUIET_S`` (counted from the later of the two), or one raises.
    The events are read in a task of their own: a wait with a deadline would be set when the
    wait starts, so one begun while the feed still ran would outlast it by its whole deadline."""
    last = [time.monotonic()]

    async def pump() -> None:
        while True:
            try:
                event = await next_event()
            except StopAsyncIteration:
                return
            last[0] = time.monotonic()
            on_event(event)

    reader = asyncio.create_task(pump())
    fed_at = None
    while not reader.done():
        await asyncio.sleep(0.2)
        if feed.done():
            fed_at = fed_at or time.monotonic()
            if time.monotonic() - max(last[0], fed_at) > QUIET_S:
                break
    reader.cancel()
    try:
        await reader
    except asyncio.CancelledError:
        pass
    await feed


async def agents_sdk(url: str, pcm: np.ndarray, realtime: bool) -> list[str]:
    from agents.voice import OpenAISTTModel, StreamedAudioInput, STTModelSettings
    from openai import AsyncOpenAI

    audio = StreamedAudioInput()
    stt = OpenAISTTModel("gpt-4o-transcribe", AsyncOpenAI(api_key="any", base_url=f"{url}/v1"))
    session = await stt.create_session(audio, STTModelSettings(turn_detection={"type": "server_vad"}), False, False)

    async def feed() -> None:
        async for block in paced(pcm, realtime):
            await audio.add_audio(block)
        await audio.add_audio(None)

    task = asyncio.create_task(feed())
    turns = [t async for t in session.transcribe_turns()]
    await task
    return turns


async def openai_realtime(url: str, pcm: np.ndarray, realtime: bool) -> list[str]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="any", websocket_base_url=url.replace("http", "ws") + "/v1")
    turns: list[str] = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}}}})  # turn_detection left to the server's default

        async def feed() -> None:
            async for block in paced(pcm, realtime):
                await conn.input_audio_buffer.append(audio=base64.b64encode(block.tobytes()).decode())

        def seen(event) -> None:
            if event.type == "conversation.item.input_audio_transcription.completed":
                turns.append(event.transcript)
            elif event.type == "error":
                raise RuntimeError(f"server error {event.error.code}: {event.error.message}")

        await until_quiet(conn.recv, seen, asyncio.create_task(feed()))
    return turns


async def livekit(url: str, pcm: np.ndarray, realtime: bool) -> list[str]:
    from livekit import rtc
    from livekit.agents import stt
    from livekit.agents.utils import http_context
    from livekit.plugins import openai

    turns: list[str] = []
    async with http_context.open():
        live = openai.STT(base_url=f"{url}/v1", api_key="any", model="gpt-4o-transcribe", use_realtime=True,
                          language="en")
        stream = live.stream()

        async def feed() -> None:
            async for block in paced(pcm, realtime):
                stream.push_frame(rtc.AudioFrame(block.tobytes(), 24000, 1, len(block)))
            stream.end_input()

        def seen(event) -> None:
            if event.type == stt.SpeechEventType.FINAL_TRANSCRIPT:
                turns.append(event.alternatives[0].text)

        await until_quiet(stream.__aiter__().__anext__, seen, asyncio.create_task(feed()))
        await stream.aclose()
        await live.aclose()
    return turns


FRAMEWORKS = {"Agents SDK": agents_sdk, "openai SDK realtime": openai_realtime, "LiveKit plugin": livekit}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=3, help="clients at once, round-robin over the frameworks")
    ap.add_argument("--pace", choices=["once", "realtime"], default="once")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--seconds", type=float, default=None, help="only the file's first S seconds (a quick check)")
    args = ap.parse_args()
    path = FILE
    if args.seconds:
        path = Path(tempfile.mkdtemp()) / FILE.name
        sf.write(path, decode_audio(str(FILE))[: int(args.seconds * 16000)], 16000)
    reference = stream_text(path, args.model)
    # the file's own transcript (the longform manifest), for the whole file only
    truth = "" if args.seconds else next(i.text for i in read_manifest(FILE.parent.parent) if i.audio.name == FILE.name)
    audio = decode_audio(str(path), sampling_rate=24000)
    pcm = (np.clip(np.concatenate([audio, np.zeros(24000, np.float32)]), -1, 1) * 32767).astype(np.int16)
    names = [list(FRAMEWORKS)[k % len(FRAMEWORKS)] for k in range(args.clients)]
    server, port = launch.start_server(["--model", args.model, "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    peak = [0.0]
    try:
        async def one(name: str) -> tuple[str, list[str] | str, float]:
            t0 = time.monotonic()
            try:
                return name, await FRAMEWORKS[name](url, pcm, args.pace == "realtime"), time.monotonic() - t0
            except Exception as err:  # noqa: BLE001 - reported per client
                return name, f"{type(err).__name__}: {err}", time.monotonic() - t0

        async def everyone():
            async def sample() -> None:
                while True:
                    peak[0] = max(peak[0], server_rss_mb(server.pid))
                    await asyncio.sleep(2.0)

            sampler = asyncio.create_task(sample())
            results = await asyncio.gather(*(one(n) for n in names))
            sampler.cancel()
            return results

        results = asyncio.run(everyone())
    finally:
        server.terminate()
        server.wait(timeout=30)
    pace = "at real-time pace" if args.pace == "realtime" else "sent at once"
    print(f"\n{args.model}, default `susurrus serve`, {FILE.name} ({len(audio) / 24000:.0f} s) {pace}, "
          f"{args.clients} client(s) at once; `susurrus stream` gives {len(reference.split())} words; "
          f"server peak RSS {peak[0]:.0f} MB (workers included)\n")

    def vs_truth(text: str) -> str:
        return f"{corpus_error_rate([(truth, text)]):.2f}" if truth else "-"

    print("| client | turns | words | WER % vs `susurrus stream` | WER % vs the file's transcript | wall s | error |")
    print("|---|---|---|---|---|---|---|")
    print(f"| `susurrus stream` (no turns) | 1 | {len(reference.split())} | 0 | {vs_truth(reference)} | | |")
    for name, turns, wall in results:
        if isinstance(turns, str):
            print(f"| {name} | - | - | - | - | {wall:.0f} | {turns[:120]} |")
            continue
        text = " ".join(turns)
        print(f"| {name} | {len(turns)} | {len(text.split())} | {corpus_error_rate([(reference, text)]):.2f} | "
              f"{vs_truth(text)} | {wall:.0f} | |")
    print(json.dumps({"results": [(n, t if isinstance(t, str) else len(t), w) for n, t, w in results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
