"""``susurrus serve``: the realtime server (Starlette on uvicorn).

- ``/v1/realtime`` (and ``/realtime``): WebSocket speaking the OpenAI Realtime transcription
  protocol (``realtime.py``);
- ``/v1/audio/transcriptions``, ``/v1/audio/translations``, ``/v1/models``: OpenAI's audio REST
  API (``rest.py``), on the same workers, limits and metrics;
- ``/healthz``: JSON status; ``/metrics``: Prometheus text;
- ``/``: the browser demo (``web/``).

One model per server; each session has its own
:class:`~susurrus.streaming.session.StreamSession` per item (with server turn detection, one for
the connection's audio, whose turns are the items). Each session's work runs in a thread pool,
one job at a time per session and in order, so the event loop only moves messages and a slow
session never blocks another's socket. The streams themselves live in ``workers`` processes
(``workers.py``: the Python side of a streaming step holds the GIL, so one process gets about
one core), each stream pinned to the least-loaded worker; ``workers=0`` runs them in the
server's threads on the one model.

Each connection is a :class:`~susurrus.server.realtime.connection.Connection` (flow control,
the bounded outgoing queue, idle and max-duration timers, how a session ends). The WebSocket
``Origin`` and the API key are checked first (``access.py``). On shutdown :func:`drain` refuses
new work and lets open work finish within ``drain_s`` (``uvicorn_ext.DrainingServer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from susurrus.server.access import key_matches, origin_allowed, parse_origins
from susurrus.server.listen import listen_socket
from susurrus.server.metrics import Metrics
from susurrus.server.realtime.connection import CLOSE_GRACE_S, Connection
from susurrus.server.realtime.protocol import (
    CLOSE_POLICY,
    CLOSE_RESTART,
    CLOSE_TRY_AGAIN,
    INVALID_API_KEY,
    ORIGIN_NOT_ALLOWED,
    SERVER_OVERLOADED,
    SERVER_SHUTTING_DOWN,
    SESSION_LIMIT,
    ProtocolError,
    error_event,
)
from susurrus.server.realtime.session import RealtimeSession
from susurrus.server.realtime.settings import Limits
from susurrus.server.realtime.transcriber import Transcriber
from susurrus.server.rest import api as rest
from susurrus.server.workers.pool import WorkerPool, model_spec

WEB_DIR = Path(__file__).with_name("web")
KEY_PROTOCOL = "openai-insecure-api-key."
BETA_PROTOCOL = "openai-beta.realtime-v1"
DEFAULT_DRAIN_S = 30.0
log = logging.getLogger("uvicorn.error")


@dataclass
class Shutdown:
    """The server's drain (``drain``): from its start new sessions and uploads are refused and
    open sessions finish their work by ``deadline`` (loop time)."""

    draining: bool = False
    deadline: float = math.inf


@dataclass
class ServerState:
    model: Any
    limits: Limits
    api_key: str | None
    pool: ThreadPoolExecutor
    metrics: Metrics = field(default_factory=Metrics)
    extensions: bool = True
    workers: WorkerPool | None = None  # None: streams run in this process, on ``model``
    uploads: rest.UploadLimits = field(default_factory=rest.UploadLimits)
    started: float = field(default_factory=time.time)
    allowed_origins: tuple[str, ...] | None = None  # None: same-origin (and clients without Origin) only
    drain_s: float = DEFAULT_DRAIN_S
    shutdown: Shutdown = field(default_factory=Shutdown)
    connections: set[Connection] = field(default_factory=set)  # the open WebSocket sessions
    jobs: set[rest.Cancel] = field(default_factory=set)  # the REST jobs running

    @property
    def transcriber(self) -> Transcriber:
        """A session's transcriber: its streams in the worker processes, or on the shared model."""
        return Transcriber(self.workers or self.model, self.metrics, self.extensions)


def _offered_key(ws: WebSocket) -> str | None:
    auth = ws.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for proto in ws.scope.get("subprotocols", []):
        if proto.startswith(KEY_PROTOCOL):
            return proto[len(KEY_PROTOCOL):]
    return None


def _choose_subprotocol(ws: WebSocket) -> str | None:
    """Browsers must get back one of the subprotocols they offered: ``realtime`` when offered,
    otherwise the first that is not a key."""
    offered = list(ws.scope.get("subprotocols", []))
    if "realtime" in offered:
        return "realtime"
    return next((p for p in offered if not p.startswith(KEY_PROTOCOL)), None)


async def _refuse(ws: WebSocket, state: ServerState, err: ProtocolError, close_code: int, subprotocol: str | None
                  ) -> None:
    """Accept only to say why, then close: browsers cannot read an HTTP refusal's body."""
    state.metrics.error(err.type, err.code)
    state.metrics.refused(err.code)
    await ws.accept(subprotocol=subprotocol)
    await ws.send_text(json.dumps(error_event(err)))
    await ws.close(code=close_code, reason=err.message[:120])


async def realtime_endpoint(ws: WebSocket) -> None:
    state: ServerState = ws.app.state.susurrus
    subprotocol = _choose_subprotocol(ws)
    if not origin_allowed(ws.headers, ws.url.scheme, state.allowed_origins):
        # refused in the handshake (HTTP 403): a page of another site gets no session at all (and
        # could not read a body: browsers hide why a handshake failed), so the reason is logged
        log.warning("susurrus: refused a WebSocket from origin %r: not this server's own and not in "
                    "--allowed-origins", ws.headers.get("origin"))
        state.metrics.refused(ORIGIN_NOT_ALLOWED)
        await ws.close(code=CLOSE_POLICY)
        return
    if state.api_key is not None and not key_matches(_offered_key(ws), state.api_key):
        err = ProtocolError(INVALID_API_KEY, "missing or invalid API key: send 'Authorization: Bearer KEY' or the "
                                             f"WebSocket subprotocol '{KEY_PROTOCOL}KEY'",
                            type="authentication_error")
        await _refuse(ws, state, err, CLOSE_POLICY, subprotocol)
        return
    if state.shutdown.draining:
        err = ProtocolError(SERVER_SHUTTING_DOWN, "the server is shutting down and takes no new sessions; "
                                                  "connect again shortly (to its replacement)", type="server_error")
        await _refuse(ws, state, err, CLOSE_RESTART, subprotocol)
        return
    overloaded, lag, _ = backlog(state)
    if overloaded:
        err = ProtocolError(SERVER_OVERLOADED, f"the server is {lag:.1f} s behind real time on its open sessions "
                                               "(median); try again later or another server", type="server_error")
        await _refuse(ws, state, err, CLOSE_TRY_AGAIN, subprotocol)
        return
    with state.metrics.lock:  # the loop is single-threaded, so this check-and-take is atomic
        full = state.metrics.sessions_open + state.metrics.requests_open >= state.limits.max_sessions
        if not full:
            state.metrics.sessions_open += 1
            state.metrics.sessions_total += 1
    if full:
        err = ProtocolError(SESSION_LIMIT, f"the server is at its limit of {state.limits.max_sessions} concurrent "
                                           "sessions; try again later", type="server_error")
        await _refuse(ws, state, err, CLOSE_TRY_AGAIN, subprotocol)
        return
    try:
        await _run_session(ws, state, subprotocol)
    finally:
        with state.metrics.lock:
            state.metrics.sessions_open -= 1


async def _run_session(ws: WebSocket, state: ServerState, subprotocol: str | None) -> None:
    beta = (ws.headers.get("openai-beta", "").startswith("realtime")
            or BETA_PROTOCOL in ws.scope.get("subprotocols", []))
    session = RealtimeSession(model_name=state.model.name, multilingual=state.model.is_multilingual,
                              limits=state.limits, metrics=state.metrics, dialect="beta" if beta else "ga",
                              extensions=state.extensions)
    await ws.accept(subprotocol=subprotocol)
    connection = Connection(ws, state, session, state.transcriber)
    state.connections.add(connection)
    try:
        await connection.run()
    finally:
        state.connections.discard(connection)


async def drain(state: ServerState, drain_s: float, forced: Callable[[], bool] = lambda: False) -> None:
    """The server shuts down: new sessions and uploads are refused from now on; open sessions
    commit their open item and finish their work, REST jobs finish, all within ``drain_s``;
    then what is left is cut (sessions close 1012 after an ``error`` saying what was not
    transcribed; REST jobs answer 503), counted as dropped ``drain_deadline``."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    m = state.metrics
    state.shutdown.deadline = t0 + drain_s
    state.shutdown.draining = True
    open_now = m.sessions_open, m.requests_open
    for connection in list(state.connections):
        connection.poke.set()

    def busy() -> bool:
        return bool(m.sessions_open or m.requests_open)

    if busy():
        log.info("susurrus: draining %d session(s) and %d request(s), at most %g s (--drain-s)", *open_now, drain_s)
    while busy() and loop.time() < state.shutdown.deadline and not forced():
        await asyncio.sleep(0.05)
    if busy():  # the deadline passed (or a second Ctrl+C): cut what is left
        state.shutdown.deadline = loop.time()
        for connection in list(state.connections):
            connection.poke.set()
        for job in list(state.jobs):
            job.cancel("drain_deadline")
        grace = loop.time() + CLOSE_GRACE_S + 1.0
        while busy() and loop.time() < grace and not forced():
            await asyncio.sleep(0.05)
    with m.lock:
        accepted, transcribed = m.audio_accepted_seconds, m.audio_seconds
        dropped = dict(m.audio_dropped)
    by_reason = ", ".join(f"{r} {v:.1f} s" for r, v in sorted(dropped.items()) if v) or "none"
    log.info("susurrus: drained in %.1f s; audio accepted %.3f s, transcribed %.3f s, dropped %.3f s (%s)",
             loop.time() - t0, accepted, transcribed, sum(dropped.values()), by_reason)


def backlog(state: ServerState) -> tuple[bool, float, float]:
    """Whether the server is overloaded (the median over ``Limits.overload_lag_s``, when set),
    and the median and the largest audio (seconds) waiting for the model, over the open
    sessions whose clients send at real-time pace (``RealtimeSession.behind_s``)."""
    now = time.monotonic()
    waiting = sorted(lag for c in state.connections if (lag := c.session.behind_s(now)) is not None)
    median, largest = (waiting[(len(waiting) - 1) // 2], waiting[-1]) if waiting else (0.0, 0.0)
    limit = state.limits.overload_lag_s
    return bool(limit) and median > limit, median, largest


async def healthz(request: Request) -> JSONResponse:
    """``ok`` (200); ``overloaded`` (200: new sessions are refused, open ones go on) while the
    model is behind real time (``Limits.overload_lag_s``); ``draining`` (503) while the server
    shuts down, so a load balancer stops sending it new clients."""
    state: ServerState = request.app.state.susurrus
    draining = state.shutdown.draining
    overloaded, lag, _ = backlog(state)
    status = "draining" if draining else "overloaded" if overloaded else "ok"
    return JSONResponse({"status": status, "model": state.model.name, "backlog_s": round(lag, 3),
                         "sessions_open": state.metrics.sessions_open, "max_sessions": state.limits.max_sessions,
                         "workers": len(state.workers) if state.workers is not None else 0},
                        status_code=503 if draining else 200)


async def metrics(request: Request) -> PlainTextResponse:
    state: ServerState = request.app.state.susurrus
    overloaded, median, largest = backlog(state)
    lines = ["# HELP susurrus_backlog_seconds Audio the open sessions have waiting for the model (median, max).",
             "# TYPE susurrus_backlog_seconds gauge",
             f'susurrus_backlog_seconds{{quantile="0.5"}} {median:.3f}',
             f'susurrus_backlog_seconds{{quantile="1"}} {largest:.3f}',
             "# HELP susurrus_overloaded 1 while new sessions are refused because the model is behind real time.",
             "# TYPE susurrus_overloaded gauge",
             f"susurrus_overloaded {int(overloaded)}"]
    return PlainTextResponse(state.metrics.render() + "\n".join(lines) + "\n",
                             media_type="text/plain; version=0.0.4; charset=utf-8")


def default_workers(device: str = "cpu") -> int:
    """Worker processes by default: one per CPU core; on a GPU one, which owns the card and
    steps every session together."""
    return 1 if device.startswith("cuda") else max(1, os.cpu_count() or 1)


def create_app(model: Any, *, limits: Limits | None = None, api_key: str | None = None, workers: int | None = None,
               threads: int | None = None, extensions: bool = True,
               uploads: rest.UploadLimits | None = None, allowed_origins: tuple[str, ...] | None = None,
               drain_s: float = DEFAULT_DRAIN_S, batched: bool = True, batch_window_ms: float = 0.0,
               step_grid_ms: float = 0.0) -> Starlette:
    """The ASGI app around a loaded :class:`~susurrus.api.WhisperModel`.

    ``workers``: processes hosting the streams, each loading the model again with ``threads``
    torch threads (default 1); default one per core; 0: the streams run in this process's
    threads, on ``model``. The workers are started (and have loaded the model) when this returns.
    ``allowed_origins``: WebSocket ``Origin``s allowed besides the server's own (``access.py``);
    ``drain_s``: how long a shutdown lets open work finish (:func:`drain`); ``batched``: each
    worker steps its streams together (``worker_process.py``), else one at a time;
    ``batch_window_ms``: an idle worker waits this long for more streams to join a round;
    ``step_grid_ms``: a worker holds a stream's due step until the next multiple of this on its
    clock, so that sessions' steps share rounds (``ModelSpec.grid_ms``)."""
    limits = limits or Limits()
    allowed_origins = parse_origins(",".join(allowed_origins)) if allowed_origins else None
    counters = Metrics()
    n = default_workers(str(getattr(model, "device", "cpu"))) if workers is None else workers
    if n < 0:
        raise ValueError(f"workers must be 0 (in-process threads) or more, not {n}")
    worker_pool: WorkerPool | None = None
    if n:
        def restarted(slot: int) -> None:
            with counters.lock:
                counters.worker_restarts += 1

        worker_pool = WorkerPool(model_spec(model, threads, batched, batch_window_ms, step_grid_ms), n,
                                 on_restart=restarted)
        counters.workers = n
        # the threads only wait for the workers' replies: one per session that may be busy
        pool = ThreadPoolExecutor(max_workers=limits.max_sessions + 2, thread_name_prefix="susurrus-session")
    else:
        model.stream()  # computes the model's shared end-of-audio context once, before threads race for it
        pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="susurrus-model")
    routes = [
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        WebSocketRoute("/realtime", realtime_endpoint),
        *rest.routes(),
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        pool.shutdown(wait=False, cancel_futures=True)
        if worker_pool is not None:
            worker_pool.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.susurrus = ServerState(model=model, limits=limits, api_key=api_key, pool=pool, metrics=counters,
                                     extensions=extensions, workers=worker_pool,
                                     uploads=uploads or rest.UploadLimits(), allowed_origins=allowed_origins,
                                     drain_s=drain_s)
    return app


def uvicorn_config(app: Starlette, host: str, port: int, limits: Limits, log_level: str = "info",
                   ssl_keyfile: str | None = None, ssl_certfile: str | None = None,
                   ws_compression: bool = False) -> Any:
    import uvicorn

    from susurrus.server.uvicorn_ext import WebSocketProtocol

    # messages up to 4x the limit get a clear error event and the session goes on; beyond that
    # the WebSocket layer closes the connection (1009) before the message is read.
    # Keepalive pings every 20 s, but no pong deadline: a client the server slows down (it stops
    # reading while the model catches up) answers only once its queued audio has been read, which
    # may take longer than any fixed deadline; a vanished client is still found by TCP, whose
    # retransmissions of the pings fail. The protocol is uvicorn's websockets-sansio one, which
    # can also close a client that stopped reading (``uvicorn_ext``). After the drain, uvicorn
    # waits at most a little longer than a close handshake for the connections left.
    # Per-message compression (permessage-deflate) only when asked: the audio a client sends is
    # base64 PCM, which deflate barely shrinks, while every append costs CPU to compress and to
    # inflate, most of it in the client (docs/benchmarks.md).
    return uvicorn.Config(app, host=host, port=port, ws=WebSocketProtocol, lifespan="on",
                          ws_max_size=4 * limits.max_message_bytes, ws_ping_interval=20.0, ws_ping_timeout=None,
                          ws_per_message_deflate=ws_compression,
                          log_level=log_level, ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile,
                          timeout_graceful_shutdown=int(CLOSE_GRACE_S) + 1)


def make_server(app: Starlette, config: Any) -> Any:
    """A uvicorn server that drains ``app`` (:func:`drain`) before it shuts down."""
    from susurrus.server.uvicorn_ext import DrainingServer

    state: ServerState = app.state.susurrus
    return DrainingServer(config, lambda forced: drain(state, state.drain_s, forced))


def serve(model: Any, host: str = "127.0.0.1", port: int = 8000, *, limits: Limits | None = None,
          api_key: str | None = None, workers: int | None = None, threads: int | None = None,
          log_level: str = "info", sock: socket.socket | None = None, uploads: rest.UploadLimits | None = None,
          allowed_origins: tuple[str, ...] | None = None, drain_s: float = DEFAULT_DRAIN_S,
          ssl_keyfile: str | None = None, ssl_certfile: str | None = None, batched: bool = True,
          batch_window_ms: float = 0.0, step_grid_ms: float = 0.0, ws_compression: bool = False) -> None:
    """Run the server until SIGTERM or Ctrl+C, then drain it (:func:`drain`); ``sock``: one from
    :func:`listen_socket` (made here when not given); ``ssl_keyfile`` and ``ssl_certfile``: serve
    TLS (https, wss); ``ws_compression``: accept WebSocket per-message compression."""
    limits = limits or Limits()
    sock = sock or listen_socket(host, port)
    app = create_app(model, limits=limits, api_key=api_key, workers=workers, threads=threads, uploads=uploads,
                     allowed_origins=allowed_origins, drain_s=drain_s, batched=batched,
                     batch_window_ms=batch_window_ms, step_grid_ms=step_grid_ms)
    config = uvicorn_config(app, host, port, limits, log_level, ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile,
                            ws_compression=ws_compression)
    make_server(app, config).run(sockets=[sock])


class BackgroundServer:
    """A real server on loopback in a background thread (tests, benchmarks)::

        with BackgroundServer(model) as server:
            server.url  # ws://127.0.0.1:PORT/v1/realtime
    """

    def __init__(self, model: Any, host: str = "127.0.0.1", port: int = 0, **options: Any):
        limits = options.pop("limits", Limits())
        tls = {key: options.pop(key, None) for key in ("ssl_keyfile", "ssl_certfile")}
        compression = options.pop("ws_compression", False)
        self.scheme = "https" if tls["ssl_certfile"] else "http"
        self.sock = listen_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.app = create_app(model, limits=limits, **options)
        self.server = make_server(self.app, uvicorn_config(self.app, host, self.port, limits, log_level="warning",
                                                           ws_compression=compression, **tls))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="susurrus-server", daemon=True)

    @property
    def state(self) -> ServerState:
        return self.app.state.susurrus

    @property
    def http_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'wss' if self.scheme == 'https' else 'ws'}://{self.host}:{self.port}/v1/realtime"

    def start(self) -> BackgroundServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.host}:{self.port} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Shut down as SIGTERM does: drain (at most ``drain_s``), then stop."""
        self.server.should_exit = True
        self.thread.join(timeout=self.state.drain_s + 2 * CLOSE_GRACE_S + 10)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
