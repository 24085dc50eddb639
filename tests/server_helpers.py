"""Helpers for the realtime server tests: a raw WebSocket client, metrics, reference transcripts."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
import urllib.request
from typing import Any

import numpy as np
from websockets import __version__ as websockets_version
from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect
from websockets.uri import parse_uri

from susurrus.audio.io import resample
from susurrus.audio.resampler import StreamResampler
from susurrus.client import append_event, session_update, to_pcm16

# Options for the OpenAI SDK's realtime connect(): the SDK opens its websockets connection with a
# plain connect() call, which websockets 17.1 deprecated outside a `with` block unless asked for
# with legacy=True (older versions do not know the flag, and did not warn).
SDK_WEBSOCKET_OPTIONS: dict[str, Any] = (
    {"legacy": True} if tuple(int(x) for x in websockets_version.split(".")[:2]) >= (17, 1) else {})


class Conn:
    """A raw protocol client over ``websockets``; every event received is kept in ``events``."""

    def __init__(self, url: str, **options: Any):
        self._connect = connect(url, max_size=None, open_timeout=10, **options)
        self.ws: ClientConnection = self._connect.__enter__()
        self.events: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any] | str | bytes) -> None:
        self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    def recv(self, timeout: float = 60) -> dict[str, Any]:
        event = json.loads(self.ws.recv(timeout=timeout))
        self.events.append(event)
        return event

    def until(self, type: str, timeout: float = 120) -> dict[str, Any]:
        """Receive until an event of ``type`` (returned); fails on a deadline, not a timing assert."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.recv(timeout=max(0.1, deadline - time.monotonic()))
            if event["type"] == type:
                return event

    def errors(self) -> list[dict[str, Any]]:
        return [e["error"] for e in self.events if e["type"] == "error"]

    def append(self, pcm16: np.ndarray, block: int, event_prefix: str = "a") -> list[str]:
        """Send ``pcm16`` in appends of ``block`` samples; returns their event ids in order."""
        ids = []
        for n, i in enumerate(range(0, len(pcm16), block)):
            ids.append(f"{event_prefix}{n}")
            self.send(append_event(pcm16[i:i + block], ids[-1]))
        return ids

    def close(self) -> None:
        self._connect.__exit__(None, None, None)

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pcm16_at(audio16k: np.ndarray, rate: int) -> np.ndarray:
    """What a client sends: the recording at ``rate`` as int16."""
    return to_pcm16(audio16k if rate == 16000 else resample(audio16k, 16000, rate))


def server_samples(pcm16: np.ndarray, rate: int) -> np.ndarray:
    """The 16 kHz samples the server transcribes for ``pcm16`` sent at ``rate``: its streaming
    resampler gives the same floats for any chunking (and offline ``resample`` to ~1e-6, which
    is tested separately; a millionth can flip a near-tie in the decoder on cut audio)."""
    x = pcm16.astype(np.float32) / 32768.0
    if rate == 16000:
        return x
    r = StreamResampler(rate, 16000)
    return np.concatenate([r.process(x), r.flush()])


_STREAMED: dict[tuple[int, str, str], tuple] = {}  # (model, latency, samples' digest): (model, finished stream)


def streamed(model, audio16k: np.ndarray, latency: str = "medium"):
    """The stream ``susurrus stream FILE --latency L`` runs on these samples, finished: the same
    calls as the command (``model.stream(latency)``, blocks of ``chunk_ms``, ``finish``). A
    reference, so computed once per model, samples and preset in a test process: a stream's
    output depends only on its samples and settings (every comparison with a server's or a
    command's transcript rests on that), and a cached one is only read."""
    key = (id(model), latency, hashlib.sha1(np.ascontiguousarray(audio16k, dtype=np.float32).tobytes()).hexdigest())
    if key in _STREAMED:
        return _STREAMED[key][1]
    stream = model.stream(latency)
    block = stream.config.chunk_ms * 16
    for i in range(0, len(audio16k), block):
        stream.feed(audio16k[i:i + block])
    stream.finish()
    _STREAMED[key] = (model, stream)  # the model kept alive: its id stays its own
    return stream


def stream_text(model, audio16k: np.ndarray, latency: str = "medium") -> str:
    """What ``susurrus stream FILE --latency L`` prints for these samples."""
    return streamed(model, audio16k, latency).text.strip()


def metrics(http_url: str) -> dict[str, float]:
    """``/metrics`` parsed: ``{'name{labels}': value}``."""
    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def wait_for_metric(http_url: str, key: str, predicate, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = metrics(http_url).get(key, 0.0)
        if predicate(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def update_event(rate: int = 24000, **session: Any) -> dict[str, Any]:
    event = session_update(rate)
    event["session"].update(session)
    return event


def words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


class NeverReads:
    """A WebSocket client on a raw socket (websockets' sans-I/O protocol) that, once connected,
    sends and never reads: whatever the server sends waits in the sockets."""

    def __init__(self, server, headers: dict[str, str]):
        self.sock = socket.create_connection((server.host, server.port), timeout=10)
        self.protocol = ClientProtocol(parse_uri(server.url))
        request = self.protocol.connect()
        for name, value in headers.items():
            request.headers[name] = value
        self.protocol.send_request(request)
        self.sock.sendall(b"".join(self.protocol.data_to_send()))
        while self.protocol.state is State.CONNECTING:  # the handshake's answer, byte by byte: nothing more
            self.protocol.receive_data(self.sock.recv(1))
        assert self.protocol.state is State.OPEN, self.protocol.handshake_exc
        self.protocol.events_received()  # the handshake's response

    def send(self, text: str) -> None:
        self.protocol.send_text(text.encode())
        self.sock.sendall(b"".join(self.protocol.data_to_send()))

    def read_all(self) -> list:
        """Now read: every frame the server sent, up to its close."""
        self.sock.settimeout(10)
        while self.protocol.close_rcvd is None:
            data = self.sock.recv(1 << 16)
            if not data:
                break
            self.protocol.receive_data(data)
        self.sock.close()
        return self.protocol.events_received()
