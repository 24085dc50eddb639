"""``susurrus client``: stream a file (or the microphone) to a realtime server and print live text.

Speaks the OpenAI Realtime transcription protocol with the ``websockets`` library: one
``session.update``, PCM16 appends of ``--block-ms`` each (paced at speaking speed with
``--realtime``), one ``input_audio_buffer.commit`` at the end, then it waits for
``...transcription.completed``. Committed text (``delta`` events) is printed plain, the
interim guess (``susurrus.interim``) dimmed on a terminal.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, TextIO

import numpy as np

from susurrus.audio.io import decode_audio


def session_update(rate: int, latency: str | None = None, language: str | None = None) -> dict[str, Any]:
    session: dict[str, Any] = {
        "type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None,
                            "transcription": {"model": "susurrus", "language": language}}},
    }
    if latency:
        session["susurrus"] = {"latency": latency}
    return {"type": "session.update", "session": session}


def append_event(pcm16: np.ndarray, event_id: str | None = None) -> dict[str, Any]:
    event = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm16.astype("<i2").tobytes()).decode()}
    if event_id:
        event["event_id"] = event_id
    return event


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.asarray(samples, np.float32) * 32768.0), -32768, 32767).astype(np.int16)


async def file_blocks(path: str, rate: int, block_ms: int, realtime: bool) -> AsyncIterator[np.ndarray]:
    audio = to_pcm16(decode_audio(path, sampling_rate=rate))
    block = rate * block_ms // 1000
    started = time.perf_counter()
    for i in range(0, len(audio), block):
        if realtime:
            ahead = i / rate - (time.perf_counter() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
        yield audio[i:i + block]


async def mic_blocks(rate: int, block_ms: int) -> AsyncIterator[np.ndarray]:
    """Microphone blocks until Ctrl+C (then the item is committed and its transcript awaited)."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as err:
        raise SystemExit(f"susurrus client: --mic needs the 'sounddevice' package and PortAudio ({err})") from None
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[np.ndarray] = asyncio.Queue()

    def callback(indata: np.ndarray, frames: int, when: Any, status: Any) -> None:
        loop.call_soon_threadsafe(blocks.put_nowait, indata[:, 0].copy())

    try:
        stream = sd.InputStream(samplerate=rate, channels=1, dtype="int16", blocksize=rate * block_ms // 1000,
                                callback=callback)
    except Exception as err:  # noqa: BLE001 - PortAudio reports missing devices in many ways
        raise SystemExit(f"susurrus client: cannot open the microphone: {err}") from None
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
    print("listening; Ctrl+C to stop", file=sys.stderr)
    with stream:
        while not stop.is_set():
            getter = asyncio.ensure_future(blocks.get())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait([getter, stopper], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.remove_signal_handler(signal.SIGINT)


class Printer:
    """Committed text plain, interim dimmed on one rewritten line (a terminal); committed text
    only otherwise."""

    DIM, RESET = "\x1b[2m", "\x1b[0m"

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.line = ""

    def show(self, committed: str, interim: str) -> None:
        if not self.tty:
            if committed:
                self.out.write(committed)
                self.out.flush()
            return
        import shutil

        self.line += committed
        width = shutil.get_terminal_size((100, 20)).columns - 1
        shown = (self.line + interim)[-width:]
        plain = max(0, len(shown) - len(interim))
        self.out.write("\r\x1b[K" + shown[:plain] + self.DIM + shown[plain:] + self.RESET)
        self.out.flush()

    def end_item(self) -> None:
        self.out.write("\n")
        self.out.flush()
        self.line = ""


async def run_client(url: str, blocks: AsyncIterator[np.ndarray], rate: int, *, latency: str | None = None,
                     language: str | None = None, api_key: str | None = None, out: TextIO = sys.stdout,
                     err: TextIO = sys.stderr) -> int:
    """Stream ``blocks`` (int16 at ``rate``) as one item; returns 0 when the transcript arrived."""
    import websockets

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    printer = Printer(out)
    status = 0
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        done = asyncio.Event()
        sent_audio = False

        async def receive() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await receive_events()

        async def receive_events() -> None:
            nonlocal status
            async for message in ws:
                event = json.loads(message)
                kind = event.get("type")
                if kind == "conversation.item.input_audio_transcription.delta":
                    printer.show(event.get("delta") or "", "")
                elif kind == "susurrus.interim":
                    printer.show("", event.get("text") or "")
                elif kind == "conversation.item.input_audio_transcription.completed":
                    printer.show("", "")
                    printer.end_item()
                    done.set()
                elif kind == "conversation.item.input_audio_transcription.failed":
                    print(f"susurrus client: transcription failed: {event['error'].get('message')}", file=err)
                    status = 1
                    done.set()
                elif kind == "error":
                    e = event.get("error", {})
                    print(f"susurrus client: server error {e.get('code')}: {e.get('message')}", file=err)
                    if e.get("code") in ("invalid_api_key", "session_limit_reached"):
                        status = 1
                        done.set()
                elif kind == "susurrus.warning":
                    print(f"susurrus client: {event.get('message')}", file=err)

        receiver = asyncio.create_task(receive())
        try:
            await ws.send(json.dumps(session_update(rate, latency, language)))
            async for block in blocks:
                if done.is_set():
                    break
                await ws.send(json.dumps(append_event(block)))
                sent_audio = sent_audio or len(block) > 0
            if sent_audio and not done.is_set():
                await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        except websockets.ConnectionClosed:
            pass
        waiter = asyncio.create_task(done.wait())
        await asyncio.wait([receiver, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not done.is_set():
            status = 1
            reason = f" ({ws.close_code} {ws.close_reason})" if ws.close_code else ""
            print(f"susurrus client: the connection closed before the transcript arrived{reason}", file=err)
        receiver.cancel()
    return status


def main_client(url: str, source: str | None, *, mic: bool, realtime: bool, rate: int, block_ms: int,
                latency: str | None, language: str | None, api_key: str | None) -> int:
    if mic:
        try:
            import sounddevice  # noqa: F401 - fail before connecting, with a clear message
        except (ImportError, OSError) as err:
            print(f"susurrus client: --mic needs the 'sounddevice' package and PortAudio ({err})", file=sys.stderr)
            return 2
        blocks = mic_blocks(rate, block_ms)
    else:
        assert source is not None
        blocks = file_blocks(source, rate, block_ms, realtime)
    try:
        return asyncio.run(run_client(url, blocks, rate, latency=latency, language=language, api_key=api_key))
    except OSError as err:
        print(f"susurrus client: cannot connect to {url}: {err}", file=sys.stderr)
        return 2
