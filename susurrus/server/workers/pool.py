"""Streaming sessions in worker processes (``susurrus serve --workers N``).

The Python side of a streaming step holds the GIL, so one server process transcribes about one
core's worth of streams however many threads it runs. :class:`WorkerPool` starts N processes
(``spawn``: torch and ``fork`` do not mix), each loading the model once, and hosts
:class:`~susurrus.streaming.session.StreamSession` objects in them by id. ``pool.stream(...)``
(the same arguments as ``WhisperModel.stream``) opens one on the least-loaded worker, where it
stays, and returns a :class:`RemoteStream`: ``feed`` / ``finish`` / ``close`` and the attributes
the server reads, each call a round trip that blocks its (executor) thread, never the event loop.

Each worker has one pipe: requests are sent under a lock and each stream's run in order; in the
worker (``worker_process.py``) the streams' ``feed`` and ``finish`` are stepped together, their
encoder and decoder passes packed; a reader thread per worker resolves the callers' futures.
A worker that exits fails its pending and later calls with
:class:`WorkerDied` (the server reports a ``failed`` / ``error`` event) and is restarted. Replies
carry the worker's compute time; :func:`compute_clock` counts it in place of the wait, so the
server's compute metrics are those of the model, not of the queue in front of it.

``pool.iterate(fn, *args)`` runs other jobs there too (the REST API's offline transcriptions):
``fn(model, *args)`` returns an iterator in the worker, and each ``next()`` on the returned
:class:`RemoteIterator` is one request, so a long job is cut into steps (a 30 s window each)
and the streams pinned to that worker wait for one step at most, never for the whole job.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import numpy as np

from susurrus.server.workers.process import NO_REPLY, READY, ModelSpec, worker_main

log = logging.getLogger("susurrus.workers")

class WorkerDied(RuntimeError):
    """The worker process hosting a stream exited: the stream is lost."""


def model_spec(model: Any, threads: int | None = None, batched: bool = True, window_ms: float = 0.0,
               grid_ms: float = 0.0) -> ModelSpec:
    """The spec that reloads a loaded :class:`~susurrus.api.WhisperModel` in another process
    (``batched``: its streams stepped together; ``window_ms``, ``grid_ms``: :class:`ModelSpec`)."""
    return ModelSpec(str(getattr(model, "source", model.name)), threads or 1,
                     bool(getattr(model, "int8_output", False)), str(getattr(model, "compute_type", "float32")),
                     batched, window_ms, grid_ms, device=str(getattr(model, "device", "cpu")))


# ---------------------------------------------------------------------------- compute accounting

_clock = threading.local()


def compute_clock() -> float:
    """``time.perf_counter()``, except that a thread's waits for a worker count as the worker's
    compute time for those calls: the difference of two readings is the compute a piece of work
    took, here and in the worker, without the time it queued behind other sessions."""
    return time.perf_counter() + getattr(_clock, "adjust", 0.0)


def _account(compute_s: float, waited_s: float) -> None:
    _clock.adjust = getattr(_clock, "adjust", 0.0) + compute_s - waited_s


# ---------------------------------------------------------------------------- the server side


class Worker:
    """One worker process, its pipe, a sender thread (requests go out in the order they were
    made, and no caller or finalizer ever blocks on a full pipe) and a reader thread that
    resolves the replies."""

    def __init__(self, slot: int, spec: ModelSpec, ctx: Any, on_exit: Callable[[Worker], None]):
        self.slot = slot
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, spec), name=f"susurrus-worker-{slot}",
                                   daemon=True)
        self.process.start()
        child.close()
        self.conn: Connection = parent
        self.lock = threading.Lock()  # ``pending`` and ``alive``
        self.pending: dict[int, Future] = {}
        self.ids = itertools.count(1)
        self.alive = True
        self.outbox: queue.SimpleQueue[tuple[int, str, int, Any] | None] = queue.SimpleQueue()  # reentrant put
        self.ready: Future = Future()
        self.sessions = 0  # streams open here (the pool's lock)
        self.started = time.monotonic()
        self._on_exit = on_exit
        self.sender = threading.Thread(target=self._send, name=f"susurrus-worker-{slot}-sender", daemon=True)
        self.reader = threading.Thread(target=self._read, name=f"susurrus-worker-{slot}-reader", daemon=True)
        self.sender.start()
        self.reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(self, op: str, sid: int, arg: Any = None) -> Future:
        """Send a request; the future resolves to ``(ok, result, compute_s, samples_fed, steps)`` or
        raises :class:`WorkerDied`."""
        fut: Future = Future()
        with self.lock:
            if not self.alive:
                raise self._died()
            req = next(self.ids)
            self.pending[req] = fut
        self.outbox.put((req, op, sid, arg))
        return fut

    def post(self, op: str, sid: int) -> None:
        """A request without a reply (close, exit); dropped if the worker is gone. Takes no lock:
        a stream's finalizer calls it from whatever thread drops the stream."""
        if self.alive:
            self.outbox.put((NO_REPLY, op, sid, None))

    def _died(self) -> WorkerDied:
        code = self.process.exitcode
        return WorkerDied(f"model worker {self.slot} (pid {self.pid}) exited"
                          + (f" with code {code}" if code is not None else "") + "; its streams are lost")

    def _send(self) -> None:
        while (message := self.outbox.get()) is not None:
            try:
                self.conn.send(message)
            except (OSError, ValueError):  # the worker is gone: the reader fails the callers
                pass
            except Exception as err:  # noqa: BLE001 - an unpicklable request fails its caller only
                with self.lock:
                    fut = self.pending.pop(message[0], None)
                if fut is not None:
                    fut.set_exception(RuntimeError(f"cannot send {message[1]!r} to a model worker: {err}"))

    def _read(self) -> None:
        while True:
            try:
                req, ok, result, compute_s, fed, steps = self.conn.recv()
            except (EOFError, OSError):
                break
            except Exception as err:  # noqa: BLE001 - an unreadable reply; its caller fails when the worker does
                log.error("model worker %d: unreadable reply: %s", self.slot, err)
                continue
            if req == READY:
                if ok:
                    self.ready.set_result(None)
                else:
                    self.ready.set_exception(result)
                continue
            with self.lock:
                fut = self.pending.pop(req, None)
            if fut is not None:
                fut.set_result((ok, result, compute_s, fed, steps))
        with self.lock:
            self.alive = False
            pending, self.pending = self.pending, {}
        self.outbox.put(None)
        self.process.join(timeout=5)
        err = self._died()
        for fut in pending.values():
            fut.set_exception(err)
        if not self.ready.done():
            self.ready.set_exception(err)
        self.sender.join(timeout=5)
        self.conn.close()
        self._on_exit(self)

    def stop(self) -> None:
        self.post("exit", 0)


class WorkerPool:
    """N worker processes hosting streams; ``stream(**kwargs)`` as ``WhisperModel.stream``.

    Starting waits until every worker has loaded the model (``RuntimeError`` if one cannot).
    ``on_restart(slot)`` is called after a worker died and a new one was started."""

    def __init__(self, spec: ModelSpec, n: int, *, start_timeout: float = 300.0,
                 on_restart: Callable[[int], None] | None = None):
        if n < 1:
            raise ValueError(f"a worker pool needs at least one worker, not {n}")
        self.spec = spec
        self.ctx = multiprocessing.get_context("spawn")
        self.lock = threading.RLock()
        self.closed = False
        self.restarts = 0
        self.on_restart = on_restart
        self.sids = itertools.count(1)
        self.workers = [Worker(i, spec, self.ctx, self._exited) for i in range(n)]
        try:
            for w in self.workers:
                w.ready.result(timeout=start_timeout)
        except BaseException as err:
            self.close()
            raise RuntimeError(f"model worker could not load {spec.source!r}: {type(err).__name__}: {err}") from err

    def __len__(self) -> int:
        return len(self.workers)

    def _exited(self, worker: Worker) -> None:
        with self.lock:
            if self.closed or self.workers[worker.slot] is not worker:
                return
            ready = worker.ready.done() and worker.ready.exception() is None
        if not ready or time.monotonic() - worker.started < 5:
            # died while loading, or soon after: do not spin; the slot stays dead meanwhile
            log.error("model worker %d (pid %s) exited early; restarting it in 5 s", worker.slot, worker.pid)
            timer = threading.Timer(5.0, self._restart, (worker,))
            timer.daemon = True
            timer.start()
        else:
            log.error("model worker %d (pid %s) exited with code %s; restarting it", worker.slot, worker.pid,
                      worker.process.exitcode)
            self._restart(worker)

    def _restart(self, worker: Worker) -> None:
        with self.lock:
            if self.closed or self.workers[worker.slot] is not worker:
                return
            self.workers[worker.slot] = Worker(worker.slot, self.spec, self.ctx, self._exited)
            self.restarts += 1
        if self.on_restart is not None:
            self.on_restart(worker.slot)

    def stream(self, latency: str | None = None, **kwargs: Any) -> RemoteStream:
        """Open a stream on the least-loaded live worker, pinned there for its life."""
        if latency is not None:
            kwargs["latency"] = latency
        stream = self._place(RemoteStream)
        try:
            stream.config = stream._call("open", kwargs)
        except BaseException:
            stream.close()
            raise
        return stream

    def iterate(self, fn: Callable[..., Any], *args: Any) -> RemoteIterator:
        """``fn(model, *args)`` (a module-level function returning an iterator; it and ``args``
        are pickled) on the least-loaded live worker; each ``next()`` of the result is one step
        there, in turn with that worker's streams."""
        job = self._place(RemoteIterator)
        try:
            job._call("iterate", (fn, args))
        except BaseException:
            job.close()
            raise
        return job

    def _place(self, cls: type[_R]) -> _R:
        with self.lock:
            if self.closed:
                raise RuntimeError("the worker pool is closed")
            live = [w for w in self.workers if w.alive]
            if not live:
                raise WorkerDied("no model worker is running (restarting)")
            worker = min(live, key=lambda w: w.sessions)
            worker.sessions += 1
            sid = next(self.sids)
        return cls(self, worker, sid)

    def load(self) -> list[int]:
        """Streams open per worker."""
        with self.lock:
            return [w.sessions for w in self.workers]

    def _release(self, worker: Worker, sid: int) -> None:
        with self.lock:
            worker.sessions -= 1
        worker.post("close", sid)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (their streams are lost); idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            workers = list(self.workers)
        for w in workers:
            w.stop()
        deadline = time.monotonic() + timeout
        for w in workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(timeout=1)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(pool: WorkerPool, worker: Worker, sid: int) -> None:
    pool._release(worker, sid)


class RemoteObject:
    """Something living in a worker process, by id: ``close()`` (or losing the last reference)
    frees it there. One call at a time."""

    def __init__(self, pool: WorkerPool, worker: Worker, sid: int):
        self.worker = worker
        self.sid = sid
        self.samples_fed = 0
        self.steps = 0  # the stream's steps so far (StreamSession.steps), as of the last reply
        self._finalizer = weakref.finalize(self, _release, pool, worker, sid)
        self._finalizer.atexit = False

    def _call(self, op: str, arg: Any = None) -> Any:
        fut = self.worker.call(op, self.sid, arg)
        t0 = time.perf_counter()
        ok, result, compute_s, fed, steps = fut.result()
        _account(compute_s, time.perf_counter() - t0)
        self.samples_fed, self.steps = fed, steps
        if not ok:
            raise result
        return result

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        self._finalizer()


_R = TypeVar("_R", bound=RemoteObject)


class RemoteIterator(RemoteObject):
    """An iterator living in a worker process (:meth:`WorkerPool.iterate`): each ``next()`` is
    one request; it closes itself at its end."""

    def __iter__(self) -> RemoteIterator:
        return self

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        more, item = self._call("next")
        if not more:
            self.close()
            raise StopIteration
        return item


class RemoteStream(RemoteObject):
    """A :class:`~susurrus.streaming.session.StreamSession` living in a worker process.

    ``feed`` / ``finish`` return the session's events; ``samples_fed`` / ``audio_time`` / ``steps``
    are kept from each reply; ``text`` / ``words`` / ``stats`` / ``language`` ask the worker."""

    config: Any = None

    @property
    def audio_time(self) -> float:
        return self.samples_fed / 16000

    def feed(self, pcm: np.ndarray) -> list[Any]:
        return self._call("feed", np.ascontiguousarray(pcm))

    def finish(self, tail: list[np.ndarray] | None = None) -> list[Any]:
        """The stream's end; ``tail``: audio pieces fed first, in the same request."""
        return self._call("finish", [np.ascontiguousarray(p) for p in tail] if tail else None)

    def get(self, name: str) -> Any:
        return self._call("get", name)

    @property
    def text(self) -> str:
        return self.get("text")

    @property
    def words(self) -> list[Any]:
        return self.get("words")

    @property
    def stats(self) -> list[Any]:
        return self.get("stats")

    @property
    def language(self) -> str | None:
        return self.get("language")
