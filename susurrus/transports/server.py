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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from susurrus.transports import rest
from susurrus.transports.listen import listen_socket
from susurrus.transports.metrics import Metrics
from susurrus.transports.realtime import RealtimeSession
from susurrus.transports.realtime_items import Work
from susurrus.transports.realtime_protocol import INVALID_API_KEY, SESSION_LIMIT, ProtocolError, error_event
from susurrus.transports.realtime_settings import Limits
from susurrus.transports.realtime_transcriber import Transcriber
from susurrus.transports.workers import WorkerPool, model_spec

WEB_DIR = Path(__file__).with_name("web")
KEY_PROTOCOL = "openai-insecure-api-key."
BETA_PROTOCOL = "openai-beta.realtime-v1"
CLOSE_POLICY = 1008  # bad API key
CLOSE_TRY_AGAIN = 1013  # too many sessions


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
    if state.api_key is not None and _offered_key(ws) != state.api_key:
        err = ProtocolError(INVALID_API_KEY, "missing or invalid API key: send 'Authorization: Bearer KEY' or the "
                                             f"WebSocket subprotocol '{KEY_PROTOCOL}KEY'",
                            type="authentication_error")
        await _refuse(ws, state, err, CLOSE_POLICY, subprotocol)
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
    transcriber = state.transcriber
    outbound: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    work_queue: asyncio.Queue[Work | None] = asyncio.Queue()
    await ws.accept(subprotocol=subprotocol)

    def queue(events: list[dict[str, Any]], works: list[Work]) -> None:
        for event in events:
            outbound.put_nowait(event)
        for work in works:
            work_queue.put_nowait(work)

    async def send_loop() -> None:
        while (event := await outbound.get()) is not None:
            await ws.send_text(json.dumps(event))

    inflight: Future | None = None  # the work running now, in the pool
    room = asyncio.Event()  # set when the session may read the next message (flow control)
    room.set()

    async def work_loop() -> None:
        nonlocal inflight
        while (work := await work_queue.get()) is not None:
            inflight = state.pool.submit(transcriber.run, work)
            result = await asyncio.wrap_future(inflight)
            session.done(work)
            if session.has_room:
                room.set()
            queue(result.events, [])
            for signal in result.signals:
                queue(*session.turn(signal))

    sender = asyncio.create_task(send_loop())
    worker = asyncio.create_task(work_loop())
    queue(session.opening_events(), [])
    try:
        while True:
            if not session.has_room:
                # flow control: too much accepted audio awaits the model, so the next message is
                # not read until it catches up; unread, the socket's buffers fill and TCP slows the
                # sender down (no append is ever refused)
                room.clear()
                waiter = asyncio.ensure_future(room.wait())
                await asyncio.wait([waiter, worker, sender], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if worker.done() or sender.done():
                    break
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            queue(*session.receive(message.get("text") if message.get("text") is not None else message.get("bytes")))
            if sender.done():  # the socket failed while sending
                break
    except WebSocketDisconnect:
        pass
    finally:
        worker.cancel()
        pending: list[Work] = []
        while not work_queue.empty():
            work = work_queue.get_nowait()
            if work is not None:
                pending.append(work)
        session.close(pending)
        release_streams(state, transcriber, inflight)
        outbound.put_nowait(None)
        sender.cancel()
        for task in (worker, sender):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def release_streams(state: ServerState, transcriber: Transcriber, inflight: Future | None) -> None:
    """Free a closed connection's streams (in the workers: at once) once its running work is done."""
    def release(_: object = None) -> None:
        with contextlib.suppress(RuntimeError):  # the pool is shut down: the workers are gone anyway
            state.pool.submit(transcriber.close)

    if inflight is not None and not inflight.done():
        inflight.add_done_callback(release)
    else:
        release()


async def healthz(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.susurrus
    return JSONResponse({"status": "ok", "model": state.model.name, "sessions_open": state.metrics.sessions_open,
                         "max_sessions": state.limits.max_sessions,
                         "workers": len(state.workers) if state.workers is not None else 0})


async def metrics(request: Request) -> PlainTextResponse:
    state: ServerState = request.app.state.susurrus
    return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def default_workers() -> int:
    """Worker processes by default: one per CPU core."""
    return max(1, os.cpu_count() or 1)


def create_app(model: Any, *, limits: Limits | None = None, api_key: str | None = None, workers: int | None = None,
               threads: int | None = None, extensions: bool = True,
               uploads: rest.UploadLimits | None = None) -> Starlette:
    """The ASGI app around a loaded :class:`~susurrus.api.WhisperModel`.

    ``workers``: processes hosting the streams, each loading the model again with ``threads``
    torch threads (default 1); default one per core; 0: the streams run in this process's
    threads, on ``model``. The workers are started (and have loaded the model) when this returns."""
    limits = limits or Limits()
    counters = Metrics()
    n = default_workers() if workers is None else workers
    if n < 0:
        raise ValueError(f"workers must be 0 (in-process threads) or more, not {n}")
    worker_pool: WorkerPool | None = None
    if n:
        def restarted(slot: int) -> None:
            with counters.lock:
                counters.worker_restarts += 1

        worker_pool = WorkerPool(model_spec(model, threads), n, on_restart=restarted)
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
                                     uploads=uploads or rest.UploadLimits())
    return app


def uvicorn_config(app: Starlette, host: str, port: int, limits: Limits, log_level: str = "info") -> Any:
    import uvicorn

    # messages up to 4x the limit get a clear error event and the session goes on; beyond that
    # the WebSocket layer closes the connection (1009) before the message is read.
    # Keepalive pings every 20 s, but no pong deadline: a client the server slows down (it stops
    # reading while the model catches up) answers only once its queued audio has been read, which
    # may take longer than any fixed deadline; a vanished client is still found by TCP, whose
    # retransmissions of the pings fail.
    return uvicorn.Config(app, host=host, port=port, ws="websockets-sansio", lifespan="on",
                          ws_max_size=4 * limits.max_message_bytes, ws_ping_interval=20.0, ws_ping_timeout=None,
                          log_level=log_level)


def serve(model: Any, host: str = "127.0.0.1", port: int = 8000, *, limits: Limits | None = None,
          api_key: str | None = None, workers: int | None = None, threads: int | None = None,
          log_level: str = "info", sock: socket.socket | None = None, uploads: rest.UploadLimits | None = None
          ) -> None:
    """Run the server until interrupted; ``sock``: one from :func:`listen_socket` (made here when not given)."""
    import uvicorn

    limits = limits or Limits()
    sock = sock or listen_socket(host, port)
    app = create_app(model, limits=limits, api_key=api_key, workers=workers, threads=threads, uploads=uploads)
    uvicorn.Server(uvicorn_config(app, host, port, limits, log_level)).run(sockets=[sock])


class BackgroundServer:
    """A real server on loopback in a background thread (tests, benchmarks)::

        with BackgroundServer(model) as server:
            server.url  # ws://127.0.0.1:PORT/v1/realtime
    """

    def __init__(self, model: Any, host: str = "127.0.0.1", port: int = 0, **options: Any):
        import uvicorn

        limits = options.pop("limits", Limits())
        self.sock = listen_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.app = create_app(model, limits=limits, **options)
        self.server = uvicorn.Server(uvicorn_config(self.app, host, self.port, limits, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="susurrus-server", daemon=True)

    @property
    def state(self) -> ServerState:
        return self.app.state.susurrus

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/realtime"

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
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
