"""The Ray cluster benchmark's parts that are not Ray (``benchmarks/ray_cluster.py`` runs them):
one real-time client session on the realtime WebSocket, and the processes' CPU, memory and
``/metrics`` as the tables read them."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


from susurrus.client import append_event, session_update  # noqa: E402

RATE = 24000
BLOCK = RATE // 10
COMPLETED = "conversation.item.input_audio_transcription.completed"


# ---------------------------------------------------------------------------- one client session


@dataclass
class Session:
    name: str
    pcm: np.ndarray
    replica: str = "?"
    opened: bool = False
    completed: bool = False
    transcript: str = ""
    errors: list[str] = field(default_factory=list)
    close_code: int | None = None
    ended_at: float = 0.0  # wall time the session ended (completed and closed, or failed)
    audio_sent_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    last_word_end: float = 0.0  # audio time of the last committed word
    hung: bool = False
    paced: bool = True  # False: send as fast as the connection takes it
    started_at: float = 0.0
    all_sent_at: float = 0.0  # when the last append went out

    @property
    def outcome(self) -> str:
        if self.hung:
            return "HUNG"
        parts = ["completed" if self.completed else "not completed"]
        if self.errors:
            parts.append("error " + ",".join(self.errors))
        if self.close_code not in (None, 1000):
            parts.append(f"close {self.close_code}")
        return ", ".join(parts)


async def run_session(url: str, s: Session, timeout_s: float) -> None:
    """Stream ``s.pcm`` at speaking pace, commit, wait for ``completed``; record everything."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    sent: list[tuple[float, float]] = []
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(url, max_size=None, open_timeout=60, ping_timeout=None) as ws:
                s.opened = True
                s.replica = ws.response.headers.get("x-susurrus-replica", "plain")
                await ws.send(json.dumps(session_update(RATE)))

                async def receive() -> None:
                    async for message in ws:
                        now = time.perf_counter()
                        ev = json.loads(message)
                        if ev["type"] == "susurrus.words":
                            for w in ev["words"]:
                                s.last_word_end = max(s.last_word_end, w["end"])
                                at = next((t for end, t in sent if end >= w["end"] - 1e-6), None)
                                if at is not None:
                                    s.latencies.append(now - at)
                        elif ev["type"] == COMPLETED:
                            s.completed, s.transcript = True, ev["transcript"]
                            return
                        elif ev["type"] == "error":
                            s.errors.append(ev["error"]["code"])

                receiver = asyncio.create_task(receive())
                t0 = s.started_at = time.perf_counter()
                try:
                    for i in range(0, len(s.pcm), BLOCK):
                        ahead = t0 + i / RATE - time.perf_counter()
                        if ahead > 0 and s.paced:
                            await asyncio.sleep(ahead)
                        if receiver.done():
                            break
                        block = s.pcm[i:i + BLOCK]
                        await ws.send(json.dumps(append_event(block)))
                        sent.append(((i + len(block)) / RATE, time.perf_counter()))
                        s.audio_sent_s = (i + len(block)) / RATE
                    if not receiver.done():
                        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                        s.all_sent_at = time.perf_counter()
                except ConnectionClosed:
                    pass
                try:
                    await receiver
                except ConnectionClosed as closed:
                    s.close_code = closed.rcvd.code if closed.rcvd else 1006
                if s.close_code is None:
                    await ws.close()
                    s.close_code = ws.close_code if ws.close_code not in (None, 1000) else None
    except ConnectionClosed as closed:
        s.close_code = closed.rcvd.code if closed.rcvd else 1006
    except TimeoutError:
        s.hung = True
    except OSError as err:
        s.errors.append(f"connect: {err}")
    s.ended_at = time.perf_counter()


def stats(values: list[float]) -> str:
    if not values:
        return "-"
    v = sorted(values)
    return f"{statistics.mean(v):.2f} / {v[int(0.9 * (len(v) - 1))]:.2f}"


# ---------------------------------------------------------------------------- processes


def tree(pids: list[int]) -> list:
    import psutil

    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        out += [p, *p.children(recursive=True)]
    return out


def cpu_s(procs: list) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except Exception:  # noqa: BLE001 - gone
            pass
    return total


def rss_mb(procs: list) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except Exception:  # noqa: BLE001
            pass
    return total / 2**20


def wait_http(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except Exception:  # noqa: BLE001
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


def metric(url: str, name: str) -> float:
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
