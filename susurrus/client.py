"""``susurrus client``: stream a file (or the microphone) to a realtime server and print live text.

Speaks the OpenAI Realtime transcription protocol with the ``websockets`` library: one
``session.update``, PCM16 appends of ``--block-ms`` each (paced at speaking speed with
``--realtime``), one ``input_audio_buffer.commit`` at the end, then it waits for
``...transcription.completed``. Committed text (``delta`` events) is printed plain, the
interim guess (``susurrus.interim``) dimmed on a terminal.

With ``--turns`` the session uses ``server_vad``: the server ends each speech turn itself and
every completed turn is printed as its own line. At the end of the audio the client commits
twice: the first commit ends a turn still open, the second (event id ``END_MARKER``) always
finds the buffer empty, and its error, which comes after everything the server had to say,
ends the session.

A file is sent as fast as the socket takes it: the server reads every message as it comes and
holds the audio its model has not reached (up to its ``--max-buffered-s``, 30 minutes by
default), so the client's keepalive pings are answered however far behind the model is. The
client keeps its socket's send buffer small (its pings are not queued behind a minute of audio)
and gives a pong :data:`PING_TIMEOUT_S` (a busy server may answer late; a dead one is found by
TCP). Any ``error`` the server reports (an append it refused, say) is printed, and the exit
status is 1: no audio is lost without the user being told.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from susurrus.cli.display import LiveDisplay

FLUSH_MARKER = "susurrus-client-flush"  # event ids of the two closing commits (--turns)
END_MARKER = "susurrus-client-end"
COMMIT_EMPTY = "input_audio_buffer_commit_empty"
SEND_BUFFER_BYTES = 64 * 1024  # the socket's send buffer: what may wait unsent behind a keepalive ping
# keepalive: a ping every 20 s (websockets' default) and a minute for its pong, not 20 s: on a
# machine busy enough that the server's event loop answers late, a pong is late, not lost
PING_INTERVAL_S, PING_TIMEOUT_S = 20.0, 60.0


class ClientError(Exception):
    """A mistake found before connecting (bad URL, unreadable file): one line for the user."""


def check_url(url: str) -> str:
    """``url`` if it is a WebSocket URL with a host, else :class:`ClientError` saying why."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        path = parts.path if parts.path.rstrip("/") not in ("", "/v1") else "/v1/realtime"
        hint = urlunsplit(("ws" if parts.scheme == "http" else "wss", parts.netloc, path, parts.query, ""))
        raise ClientError(f"{url} is an HTTP URL; the realtime endpoint is a WebSocket: {hint}")
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ClientError(f"{url} is not a WebSocket URL (ws://HOST:PORT/v1/realtime)")
    return url


def session_update(rate: int, latency: str | None = None, language: str | None = None,
                   turns: bool = False) -> dict[str, Any]:
    """``session.update`` for a transcription session; ``turns``: ``server_vad`` with OpenAI's
    defaults (threshold 0.5, 300 ms prefix padding, 500 ms of silence ends a turn)."""
    turn_detection = {"type": "server_vad"} if turns else None
    session: dict[str, Any] = {
        "type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": turn_detection,
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


def load_file(path: str, rate: int) -> np.ndarray:
    """The file as int16 at ``rate`` (decoded before connecting: a bad file fails first)."""
    from susurrus.audio.io import decode_audio  # PyTorch (its resampler): after the arguments are checked

    try:
        audio = decode_audio(path, sampling_rate=rate)
    except (OSError, ValueError) as err:
        raise ClientError(str(err) if path in str(err) else f"{path}: {err}") from None
    if not len(audio):
        raise ClientError(f"{path}: the file holds no audio")
    return to_pcm16(audio)


async def file_blocks(audio: np.ndarray, rate: int, block_ms: int, realtime: bool) -> AsyncIterator[np.ndarray]:
    """``audio`` (int16 at ``rate``, from :func:`load_file`) in blocks of ``block_ms``."""
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


async def run_client(url: str, blocks: AsyncIterator[np.ndarray], rate: int, *, latency: str | None = None,
                     language: str | None = None, api_key: str | None = None, turns: bool = False,
                     out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Stream ``blocks`` (int16 at ``rate``) as one item, or with ``turns`` as speech turns the
    server detects (one line each); returns 0 when every transcript arrived."""
    import websockets

    out, err = out or sys.stdout, err or sys.stderr  # looked up now: the caller may have redirected them
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    printer = LiveDisplay(out, True, turns)
    status = 0
    errors = 0  # error events: each may mean audio the server did not take
    refused = False  # the server refused the session (API key, session limit): nothing was transcribed
    async with websockets.connect(url, additional_headers=headers, max_size=None, ping_interval=PING_INTERVAL_S,
                                  ping_timeout=PING_TIMEOUT_S) as ws:
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:  # little unsent audio queued in the kernel: pings get through under flow control
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        done = asyncio.Event()
        sent_audio = False
        spans: dict[str, list[int]] = {}  # --turns: item_id -> [audio_start_ms, audio_end_ms]

        async def receive() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await receive_events()

        async def receive_events() -> None:
            nonlocal status, errors, refused
            async for message in ws:
                event = json.loads(message)
                kind = event.get("type")
                if kind == "conversation.item.input_audio_transcription.delta":
                    printer.update(event.get("delta") or "", "")
                elif kind == "susurrus.interim":
                    printer.update("", event.get("text") or "")
                elif kind == "input_audio_buffer.speech_started":
                    spans[event.get("item_id", "")] = [event.get("audio_start_ms", 0)] * 2
                elif kind == "input_audio_buffer.speech_stopped":
                    spans.setdefault(event.get("item_id", ""), [0, 0])[1] = event.get("audio_end_ms", 0)
                elif kind == "conversation.item.input_audio_transcription.completed":
                    if turns:
                        start, end = spans.pop(event.get("item_id", ""), [0, 0])
                        printer.turn(event.get("transcript") or "", start, end)
                    else:
                        printer.update("", "")
                        printer.end_line()
                        done.set()
                elif kind == "conversation.item.input_audio_transcription.failed":
                    print(f"susurrus client: transcription failed: {event['error'].get('message')}", file=err)
                    status = 1
                    if not turns:
                        done.set()
                elif kind == "error":
                    e = event.get("error", {})
                    if turns and e.get("event_id") in (FLUSH_MARKER, END_MARKER) and e.get("code") == COMMIT_EMPTY:
                        if e.get("event_id") == END_MARKER:  # the server has said everything
                            done.set()
                        continue
                    errors += 1
                    if not turns and e.get("event_id") == END_MARKER:  # the commit failed: no transcript comes
                        done.set()
                    if errors <= 5:
                        print(f"susurrus client: server error {e.get('code')}: {e.get('message')}", file=err)
                    if e.get("code") in ("invalid_api_key", "session_limit_reached"):
                        refused = True
                        done.set()
                elif kind == "susurrus.warning":
                    print(f"susurrus client: {event.get('message')}", file=err)

        receiver = asyncio.create_task(receive())
        try:
            await ws.send(json.dumps(session_update(rate, latency, language, turns)))
            async for block in blocks:
                if done.is_set():
                    break
                await ws.send(json.dumps(append_event(block)))
                sent_audio = sent_audio or len(block) > 0
            if sent_audio and not done.is_set():
                if turns:  # end the open turn, then a commit that only says the server is done
                    for marker in (FLUSH_MARKER, END_MARKER):
                        await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": marker}))
                else:
                    await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": END_MARKER}))
            elif not sent_audio:
                done.set()
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
    if errors:
        status = 1
    if errors and not refused:
        print(f"susurrus client: the server reported {errors} error(s) (the first 5 are shown above); "
              "the transcript may be incomplete", file=err)
    return status


def main_client(url: str, source: str | None, *, mic: bool, realtime: bool, rate: int, block_ms: int,
                latency: str | None, language: str | None, api_key: str | None, turns: bool = False) -> int:
    """``susurrus client``: everything checked before connecting (URL, file), then streamed."""
    import websockets

    try:
        check_url(url)
        if mic:
            try:
                import sounddevice  # noqa: F401 - fail before connecting, with a clear message
            except (ImportError, OSError) as err:
                raise ClientError(f"--mic needs the 'sounddevice' package and PortAudio ({err})") from None
            blocks = mic_blocks(rate, block_ms)
        else:
            assert source is not None
            blocks = file_blocks(load_file(source, rate), rate, block_ms, realtime)
    except ClientError as err:
        print(f"susurrus client: error: {err}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_client(url, blocks, rate, latency=latency, language=language, api_key=api_key,
                                      turns=turns))
    except websockets.InvalidStatus as err:
        code = err.response.status_code
        hint = " (is the path /v1/realtime?)" if code in (403, 404) else ""
        print(f"susurrus client: error: {url} refused the WebSocket connection: HTTP {code}{hint}", file=sys.stderr)
        return 2
    except (OSError, websockets.InvalidHandshake, websockets.InvalidURI, asyncio.TimeoutError) as err:
        print(f"susurrus client: error: cannot connect to {url}: {err}", file=sys.stderr)
        return 2
