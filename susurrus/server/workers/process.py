"""Inside a model worker process (``susurrus serve --workers N``): the streams it hosts, stepped
together.

The server sends requests ``(id, op, session, arg)`` down one pipe; the worker answers each with
``(id, ok, result or exception, compute seconds, session's samples_fed, session's steps)``. ``feed`` and
``finish`` are not run one after another: each becomes its stream's step generator
(``StreamSession.feed_steps``) in one :class:`~susurrus.streaming.calls.Lockstep`, and the
worker runs rounds of it, taking in every request that arrived before each round (continuous
batching, as a batching server keeps its batch full: a stream joins at the next round, and one
that is done answers at once, without waiting for the others' longer decodes). With a step grid
(``grid_ms``), a feed that completes its stream's step waits for the next grid time, so that the
steps of sessions that started at different times run in the same rounds (their texts do not
change: a stream's text depends on its audio, not on when its steps run). So the streams
whose audio is due are encoded and decoded in packed passes, which read the weights and pay the
Python overhead once per round. A request for a stream whose work is in the lockstep waits
behind it, so each stream's requests run in order. With ``batched=False`` (``--no-batching``)
every request runs alone, in order, as before.

Other requests (open, get, close, the REST jobs' ``iterate``, ``stats``: the lockstep's rounds
and calls so far) run between rounds. A REST job's ``next`` (one 30 s window of an offline
transcription, a second or more of compute) is background work: it waits until a round leaves
the lockstep empty, so the realtime streams' steps go first, or at most ``BACKGROUND_WAIT_S``,
so that an upload still finishes on a worker that is never idle.
The compute a reply reports is the stream's own: its step's Python and an equal share of each
packed pass it was in (:class:`~susurrus.streaming.calls.Lockstep`).
"""

from __future__ import annotations

import ctypes
import pickle
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

TRIM_EVERY_S = 1.0  # while a worker works, this often the freed heap goes back to the system (heap_trimmer)
READY = 0  # request id of a worker's "model loaded" message
NO_REPLY = -1  # request id of a message that is not answered (close)
STEPPED = ("feed", "finish")  # the requests that run as step generators
BACKGROUND = ("next",)  # the requests that wait for the realtime streams' rounds (REST windows)
# the longest a background request waits for an empty lockstep: a 10-minute upload's 20 windows
# wait at most 20 s in all on a worker that is never idle
BACKGROUND_WAIT_S = 1.0


@dataclass(frozen=True)
class ModelSpec:
    """What a worker loads: ``load_model(source, int8_output=..., compute_type=...)`` with
    ``threads`` torch threads; ``batched``: step its streams together; ``window_ms``: when a
    step request finds the worker idle, wait this long for others to join its first round;
    ``grid_ms``: hold a feed that completes its stream's step until the next multiple of this
    many ms on the worker's clock, so that the steps of sessions that started at different
    times share rounds (0: never hold)."""

    source: str
    threads: int = 1
    int8_output: bool = False
    compute_type: str = "auto"
    batched: bool = True
    window_ms: float = 0.0
    grid_ms: float = 0.0
    device: str = "cpu"  # where it loads the model (a CUDA card: one worker owns it, every session stepped together)


def finish_steps(stream: Any, tail: list[Any] | None) -> Any:
    """``finish`` with the audio not fed yet (``tail``: pieces fed first, in order): one request,
    so a commit's end runs as one urgent generator instead of a feed that waits for a round."""
    events: list[Any] = []
    for piece in tail or ():
        events += yield from stream.feed_steps(piece)
    events += yield from stream.finish_steps()
    return events


def portable(err: BaseException) -> BaseException:
    """``err`` if it survives pickling, else a RuntimeError with its type and message."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}")


def heap_trimmer() -> Callable[[], Any] | None:
    """glibc's ``malloc_trim(0)``: the heap pages that no allocation holds go back to the system
    (None where there is no glibc). A worker's tensors come and go in every size as streams of
    different lengths step together, and glibc keeps what is freed: it raises its mmap threshold
    (to 32 MiB) and its trim threshold (twice that) to the largest block freed, so the heap holds
    on to freed memory and the worker's RSS climbs towards the largest load it ever had (the
    soak's workers: +19 % in 24 h of audio). Trimmed every second of work (~13 ms each), RSS
    follows what the streams hold (an 8-stream worker over 3.2 h of audio: within ±2.5 %, against
    +7.5 % trimmed only when a stream closes; a fixed mmap threshold of 1 MiB instead: +3.6-7 %,
    and of 64 KiB: flat but 30 % more CPU in page faults; the 24-hour soak since: +3.5 % at most;
    docs/journal/2026-12.md, "Why the workers grew")."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def worker_main(conn: Connection, spec: ModelSpec) -> None:
    """A worker process: load the model, say so, then serve requests until told to exit or the
    server is gone."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server shuts us down
    import torch

    from susurrus.api import load_model

    torch.set_num_threads(spec.threads)
    try:
        model = load_model(spec.source, int8_output=spec.int8_output, compute_type=spec.compute_type,
                           device=spec.device)
        model.stream()  # the shared end-of-audio context, once
    except BaseException as err:  # noqa: BLE001 - reported to the server, which refuses to start
        conn.send((READY, False, portable(err), 0.0, 0, 0))
        return
    conn.send((READY, True, None, 0.0, 0, 0))
    WorkerLoop(conn, model, spec.batched, spec.window_ms, spec.grid_ms).run()


class WorkerLoop:
    """The request loop of one worker (see the module's docstring)."""

    def __init__(self, conn: Connection, model: Any, batched: bool = True, window_ms: float = 0.0,
                 grid_ms: float = 0.0):
        from susurrus.streaming.calls import Lockstep

        self.conn = conn
        self.model = model
        self.batched = batched
        self.window_s = window_ms / 1000
        self.grid_s = grid_ms / 1000
        self.sessions: dict[int, Any] = {}
        self.lockstep = Lockstep(model.net)
        self.busy: dict[int, deque[tuple]] = {}  # stream id -> requests waiting behind its work in the lockstep
        self.held: list[tuple[int, int, Any]] = []  # (request, stream id, step generator) waiting for the grid
        self.background: deque[tuple[float, tuple]] = deque()  # (when it came, request) waiting for the rounds
        self.release_at = 0.0  # when the held feeds join the lockstep
        self.trim = heap_trimmer()
        self.worked_since_trim = False
        self.trimmed_at = time.monotonic()

    def run(self) -> None:
        while True:
            if self.held and time.monotonic() >= self.release_at:
                self._release()
            idle = not len(self.lockstep) and not self.background
            trimming = self.worked_since_trim and self.trim is not None
            due = self.trimmed_at + TRIM_EVERY_S - time.monotonic()  # the next trim, after some work
            if trimming and due <= 0:
                self._trim()
                trimming = False
            try:
                if idle:  # nothing in flight: wait for a request (and trim, or release held feeds, meanwhile)
                    waits = ([max(0.0, due)] if trimming else []) + ([self.release_at - time.monotonic()]
                                                                      if self.held else [])
                    if waits and not self.conn.poll(max(0.0, min(waits))):
                        if trimming and self.trimmed_at + TRIM_EVERY_S <= time.monotonic():
                            self._trim()
                        continue
                    if not self._take(self.conn.recv()):
                        return
                    if self.window_s and len(self.lockstep):  # a round starts: let others join it
                        until = time.monotonic() + self.window_s
                        while (left := until - time.monotonic()) > 0 and self.conn.poll(left):
                            if not self._take(self.conn.recv()):
                                return
                while self.conn.poll():  # everything that has arrived joins the next round
                    if not self._take(self.conn.recv()):
                        return
            except (EOFError, OSError):  # the server is gone
                return
            if self.background and (not len(self.lockstep)
                                    or time.monotonic() - self.background[0][0] >= BACKGROUND_WAIT_S):
                self._run_background()
            else:
                self.lockstep.round()

    def _hold(self, req: int, sid: int, steps: Any) -> None:
        """Keep a feed that completes its stream's step until the next grid time (its stream's
        later requests queue behind it, as behind work in the lockstep)."""
        if not self.held:
            now = time.monotonic()
            self.release_at = (now // self.grid_s + 1) * self.grid_s
        self.busy[sid] = deque()
        self.held.append((req, sid, steps))

    def _release(self) -> None:
        held, self.held = self.held, []
        for req, sid, steps in held:
            self.lockstep.add(steps, self._ender(req, sid))

    def _trim(self) -> None:
        assert self.trim is not None
        self.trim(0)
        self.worked_since_trim, self.trimmed_at = False, time.monotonic()

    def _take(self, message: tuple) -> bool:
        """Start a request, or queue it behind its stream's work; False on ``exit``."""
        if message[1] == "exit":
            return False
        self.worked_since_trim = True
        sid = message[2]
        if sid in self.busy:
            self.busy[sid].append(message)
        else:
            self._start(message)
        return True

    def _run_background(self) -> None:
        """The oldest background request, then the requests its stream queued meanwhile."""
        _, (req, op, sid, arg) = self.background.popleft()
        ok, result, compute_s = self._timed(op, sid, arg)
        self._ender(req, sid)(result if ok else None, None if ok else result, compute_s)

    def _timed(self, op: str, sid: int, arg: Any) -> tuple[bool, Any, float]:
        """``_run``'s answer or error, and its compute time."""
        t0 = time.perf_counter()
        try:
            ok, result = True, self._run(op, sid, arg)
        except KeyError:
            ok, result = False, RuntimeError(f"no stream {sid} in this worker")
        except Exception as err:  # noqa: BLE001 - the caller raises it
            ok, result = False, err
        return ok, result, time.perf_counter() - t0

    def _start(self, message: tuple) -> None:
        req, op, sid, arg = message
        if op in BACKGROUND and self.batched:
            self.busy[sid] = deque()  # the job's later requests (a close) wait behind it
            self.background.append((time.monotonic(), message))
            return
        if op in STEPPED and self.batched:
            try:
                stream = self.sessions[sid]
                steps = stream.feed_steps(arg) if op == "feed" else finish_steps(stream, arg)
            except KeyError:
                self._reply(req, False, RuntimeError(f"no stream {sid} in this worker"), 0.0, sid)
            except Exception as err:  # noqa: BLE001 - bad audio, a finished stream: the caller raises it
                self._reply(req, False, err, 0.0, sid)
            else:
                if self.grid_s and op == "feed" and stream.step_due(len(arg)):
                    self._hold(req, sid, steps)
                    return
                self.busy[sid] = deque()
                # the end of an item: a client waits for its ``completed``, so its rounds go first
                self.lockstep.add(steps, self._ender(req, sid), urgent=op == "finish")
            return
        ok, result, compute_s = self._timed(op, sid, arg)
        if req != NO_REPLY:
            self._reply(req, ok, result, compute_s, sid)

    def _ender(self, req: int, sid: int) -> Callable[[Any, BaseException | None, float], None]:
        def done(value: Any, error: BaseException | None, compute_s: float) -> None:
            self._reply(req, error is None, value if error is None else error, compute_s, sid)
            waiting = self.busy.pop(sid, deque())
            while waiting:  # the stream's next requests, in order, until one is in flight again
                message = waiting.popleft()
                if sid in self.busy:
                    self.busy[sid].append(message)
                else:
                    self._start(message)
        return done

    def _run(self, op: str, sid: int, arg: Any) -> Any:
        sessions = self.sessions
        if op == "close":
            sessions.pop(sid, None)
            return None
        if op == "open":
            sessions[sid] = self.model.stream(**arg)
            return sessions[sid].config
        if op == "feed":
            return sessions[sid].feed(arg)
        if op == "finish":
            return [e for piece in arg or () for e in sessions[sid].feed(piece)] + sessions[sid].finish()
        if op == "get":
            return getattr(sessions[sid], arg)
        if op == "stats":  # how much the lockstep batched so far
            return {"rounds": self.lockstep.rounds, "calls": self.lockstep.calls}
        if op == "iterate":
            fn, args = arg
            sessions[sid] = iter(fn(self.model, *args))
            return None
        if op == "next":
            try:
                return True, next(sessions[sid])
            except StopIteration:
                return False, None
        raise ValueError(f"unknown worker request {op!r}")

    def _reply(self, req: int, ok: bool, result: Any, compute_s: float, sid: int) -> None:
        if not ok:
            result = portable(result)
        stream = self.sessions.get(sid)
        reply = (req, ok, result, compute_s, getattr(stream, "samples_fed", 0), getattr(stream, "steps", 0))
        try:
            self.conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            self.conn.send((req, False, RuntimeError(f"reply not picklable: {err}"), compute_s, reply[4], reply[5]))
