"""The soak's clients (``benchmarks/soak.py`` runs them): the recordings sessions cut pieces from,
a session's life on the realtime WebSocket (connect, stream pieces and pauses at a pace, commit,
close or drop), and the client slots that run sessions back to back on a plan that repeats
every period."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.client import (  # noqa: E402
    COMMIT_EMPTY,
    SEND_BUFFER_BYTES,
    append_event,
    session_update,
    to_pcm16,
)
from susurrus.evaluation.data import read_manifest  # noqa: E402
from susurrus.evaluation.health import longest_repetition  # noqa: E402

RATE = 24000
END_MARKER = "soak-end"
FLUSH_MARKER = "soak-flush"
ENDINGS = ("commit", "close", "abort")


def periods_of(total_s: float) -> float:
    """The length of a table row in seconds of audio: an hour, or a quarter of a run under 2 h."""
    return 3600.0 if total_s >= 7200 else total_s / 4


# ---------------------------------------------------------------------------- the audio

class Source:
    """The recordings (24 kHz int16) that sessions cut pieces from, weighted by duration."""

    def __init__(self, dirs: list[str]):
        self.clips: list[np.ndarray] = []
        for d in dirs:
            for item in read_manifest(d):
                if getattr(item, "language", "en") not in ("en", None):
                    continue
                self.clips.append(to_pcm16(decode_audio(item.audio, sampling_rate=RATE)))
        if not self.clips:
            raise SystemExit(f"no English recordings in {dirs}")
        lengths = np.array([len(c) for c in self.clips], float)
        self.weights = lengths / lengths.sum()
        self.seconds = lengths.sum() / RATE

    def pieces(self, rng: random.Random, piece_s: tuple[float, float], pause_s: tuple[float, float]
               ) -> Any:
        """Endless (speech, silence) pairs: a random stretch of a random recording, then a
        silence of log-uniform length (faint noise, not digital zero)."""
        nprng = np.random.default_rng(rng.getrandbits(32))
        while True:
            clip = self.clips[int(nprng.choice(len(self.clips), p=self.weights))]
            n = min(len(clip), int(rng.uniform(*piece_s) * RATE))
            start = rng.randrange(0, len(clip) - n + 1)
            pause = math.exp(rng.uniform(math.log(pause_s[0]), math.log(pause_s[1])))
            silence = nprng.normal(0, 8, int(pause * RATE)).astype(np.int16)
            yield clip[start:start + n], silence


# ---------------------------------------------------------------------------- the clients

@dataclass
class Session:
    """One connection of a client slot."""

    n: int
    slot: int
    turns: bool
    ending: str  # planned: commit (clean), close (mid-stream, clean close), abort (TCP dropped)
    planned_s: float
    sent_s: float = 0.0
    connected: float = 0.0
    closed: float = 0.0
    ended: str = ""  # what happened
    commits: int = 0
    completed: int = 0
    words: int = 0
    errors: list[str] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)  # item_id -> deltas
    finals: dict[str, str] = field(default_factory=dict)  # item_id -> completed transcript
    repetition: int = 0

    def transcript(self) -> str:
        return " ".join(self.finals.get(i, "".join(d)).strip() for i, d in self.texts.items())


@dataclass
class Soak:
    url: str
    source: Source
    target_s: float
    speed: float
    block: int
    args: argparse.Namespace
    sent_s: float = 0.0
    connects: int = 0
    refused: int = 0
    open: int = 0
    sessions: list[Session] = field(default_factory=list)
    words: list[tuple[float, float, float]] = field(default_factory=list)  # (wall clock, algorithmic, wall latency)
    started: float = 0.0  # perf_counter at the first session
    accepted_s: float = 0.0  # audio the server accepted, as of the last /metrics sample
    probes: list[float] = field(default_factory=list)  # host_probe.py's timings (ms), in order

    @property
    def done(self) -> bool:
        # the target is audio the server accepted: what dropped connections left in their sockets
        # never reached it (2 % more sent stops a run whose server stopped accepting)
        return self.accepted_s >= self.target_s or self.sent_s >= 1.02 * self.target_s


async def run_session(soak: Soak, s: Session, rng: random.Random) -> None:
    import websockets

    a = soak.args
    async with websockets.connect(soak.url, max_size=None, open_timeout=120, close_timeout=10) as ws:
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:  # as `susurrus client`: pings are not queued behind much audio
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        soak.connects += 1
        soak.open += 1
        s.connected = time.time()
        try:
            await ws.send(json.dumps(session_update(RATE, turns=s.turns)))
        except websockets.ConnectionClosed as err:  # refused at the door (session limit, overload)
            soak.open -= 1
            s.ended = "refused"
            s.errors.append(f"closed {err.rcvd.code if err.rcvd else 'abnormally'}")
            soak.refused += 1
            return
        sent: list[float] = []  # session audio position at the end of each append
        sent_at: list[float] = []  # and when it was sent
        item_starts = [0.0]  # without turns: the session audio position where each item starts
        items: list[str] = []  # item ids in order of first appearance
        finished = asyncio.Event()
        acked = [0, False]  # without turns: committed events received; the last commit answered

        def check_finished() -> None:
            if not s.turns and acked[1] and s.completed >= acked[0]:
                finished.set()

        def item_start(item_id: str) -> float:
            if s.turns:
                return 0.0  # turn words are in the session's audio time
            if item_id not in items:
                items.append(item_id)
            k = items.index(item_id)
            return item_starts[k] if k < len(item_starts) else item_starts[-1]

        async def receive() -> None:
            async for message in ws:
                now = time.perf_counter()
                ev = json.loads(message)
                kind = ev.get("type")
                if kind == "conversation.item.input_audio_transcription.delta":
                    s.texts.setdefault(ev["item_id"], []).append(ev.get("delta") or "")
                elif kind == "susurrus.words":
                    offset = item_start(ev["item_id"])
                    for w in ev["words"]:
                        s.words += 1
                        i = bisect.bisect_left(sent, offset + w["end"] - 1e-6)
                        wall = now - sent_at[i] if i < len(sent_at) else float("nan")
                        soak.words.append((now - soak.started, w["emitted_at"] - w["end"], wall))
                elif kind in ("input_audio_buffer.committed", "input_audio_buffer.speech_started"):
                    item_start(ev["item_id"])
                    s.texts.setdefault(ev["item_id"], [])
                    if kind == "input_audio_buffer.committed" and not s.turns:
                        acked[0] += 1
                        acked[1] = s.ended == "commit" and acked[0] >= s.commits
                        check_finished()
                elif kind in ("conversation.item.input_audio_transcription.completed",
                              "conversation.item.input_audio_transcription.failed"):
                    s.completed += 1
                    s.texts.setdefault(ev["item_id"], [])
                    if kind.endswith("completed"):
                        s.finals[ev["item_id"]] = ev.get("transcript") or ""
                    else:
                        s.errors.append("transcription_failed")
                    check_finished()
                elif kind == "error":
                    e = ev.get("error", {})
                    if e.get("event_id") in (FLUSH_MARKER, END_MARKER) and e.get("code") == COMMIT_EMPTY:
                        if e.get("event_id") == END_MARKER:
                            if s.turns:
                                finished.set()
                            else:  # the buffer was empty: the last commit was at the last pause
                                s.commits -= 1
                                acked[1] = True
                                check_finished()
                        continue
                    s.errors.append(str(e.get("code")))
                    if e.get("code") == "session_limit_reached":
                        soak.refused += 1

        receiver = asyncio.create_task(receive())
        cut = s.planned_s * rng.uniform(0.3, 1.0) if s.ending != "commit" else math.inf
        pos = 0.0
        t0 = time.perf_counter()
        pieces = soak.source.pieces(rng, a.piece_s, a.pause_s)
        limit = min(s.planned_s, cut)
        try:
            while not soak.done and pos < limit and not receiver.done():
                speech, silence = next(pieces)
                for part in (speech, silence):
                    for i in range(0, len(part), soak.block):
                        if pos >= limit or soak.done or receiver.done():
                            break
                        ahead = t0 + pos / soak.speed - time.perf_counter()
                        if ahead > 0:
                            await asyncio.sleep(ahead)
                        elif ahead < -2.0:  # held back by flow control: do not burst to catch up
                            t0 -= ahead
                        chunk = part[i:i + soak.block]
                        await ws.send(json.dumps(append_event(chunk)))
                        pos += len(chunk) / RATE
                        sent.append(pos)
                        sent_at.append(time.perf_counter())
                        s.sent_s = pos
                        soak.sent_s += len(chunk) / RATE
                if not s.turns and pos < limit and not soak.done and rng.random() < a.commit_share:
                    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                    s.commits += 1
                    item_starts.append(pos)
            if s.ending == "commit" or pos < cut:  # a clean end (also when the run's audio is done)
                s.ended = "commit"
                if s.turns:  # end the open turn, then a commit that only says the server is done
                    for marker in (FLUSH_MARKER, END_MARKER):
                        await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": marker}))
                else:
                    await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": END_MARKER}))
                    s.commits += 1
                    item_starts.append(pos)
                waiter = asyncio.create_task(finished.wait())
                await asyncio.wait([waiter, receiver], timeout=a.finish_timeout_s,
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if not finished.is_set():
                    s.errors.append("no_final_transcript")
                await ws.close()
            elif s.ending == "close":
                s.ended = "close"
                await ws.close()
            else:
                s.ended = "abort"
                ws.transport.abort()
        except websockets.ConnectionClosed as err:
            s.ended = s.ended or "server_closed"
            s.errors.append(f"closed {err.rcvd.code if err.rcvd else 'abnormally'}")
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver
            soak.open -= 1
            s.closed = time.time()
            s.repetition = longest_repetition(s.transcript().split())


async def run_slot(soak: Soak, slot: int, seed: int) -> None:
    """One client slot: sessions back to back until the run's audio is done. The slot's plan
    (sessions, their recordings, pauses, commits and endings) repeats every ``cycle`` seconds
    of its audio, a period of the report's table shared among the slots: every period then
    carries the same work, so what moves from one to the next is the server, not the mix."""
    import websockets

    a = soak.args
    cycle = periods_of(soak.target_s) / a.sessions
    rng, next_cycle, sent = random.Random(seed), cycle, 0.0
    while not soak.done:
        if sent >= next_cycle - 0.5:  # the plan starts over (a session that crossed the end was cut there)
            rng, next_cycle = (rng if a.fresh_plans else random.Random(seed)), sent + cycle
        n = len(soak.sessions)
        ending = rng.choices(ENDINGS, weights=(1 - a.close_share - a.abort_share, a.close_share, a.abort_share))[0]
        turns, planned = rng.random() < a.turns_share, rng.uniform(*a.session_s)
        s = Session(n, slot, turns, ending, min(planned, next_cycle - sent))
        soak.sessions.append(s)
        try:
            await run_session(soak, s, rng)
        except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake) as err:
            s.ended = "connect_failed"
            s.errors.append(f"connect: {type(err).__name__}: {err}")
            await asyncio.sleep(1.0)
        sent += s.sent_s
        if "session_limit_reached" in s.errors or s.ended == "refused":
            await asyncio.sleep(0.5)
