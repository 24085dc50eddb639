"""One Realtime WebSocket connection on the server: the loop that moves messages between the
socket, the :class:`~susurrus.server.realtime.session.RealtimeSession` and the thread pool, and how
the connection ends.

Three tasks per connection: the reader (this loop: client messages into the session, whose
work is queued), the worker (runs the work in order in the pool) and the sender (the events out).
The reader reads every message as it comes, however far behind the model is, so the socket
never holds a client's keepalive ping behind unread audio (uvicorn answers a ping once it reads
it); the accepted audio waits in memory, bounded by ``max_buffered_s`` per session, past which
appends are refused (``input_audio_backlog_full``). Endings:

- the client leaves (or its socket fails): the queued work is dropped (``client_gone``);
- the outgoing queue passes ``max_outbound_bytes`` (the client stopped reading): the queue is
  freed, the queued work dropped (``backpressure``), ``client_too_slow`` and close 1008 are put
  behind what the socket already holds, and the connection is aborted if the client does not
  answer the close within :data:`CLOSE_GRACE_S`;
- no client message and no work for ``idle_s``: ``idle_timeout``, close 1000;
- ``max_session_s`` reached, or the server shuts down: the reader stops, the open item is
  committed (the open turn ended) and the queued work finishes, all by the drain deadline
  (``--drain-s``); then close 1000 (``session_expired`` first) or 1012; what the deadline cut
  is dropped (``session_expired`` / ``drain_deadline``) and said in an ``error`` event first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from susurrus.server.realtime.items import Work
from susurrus.server.realtime.protocol import (
    CLIENT_TOO_SLOW,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_RESTART,
    IDLE_TIMEOUT,
    SERVER_SHUTTING_DOWN,
    SESSION_EXPIRED,
    ProtocolError,
    error_event,
    server_event,
)
from susurrus.server.realtime.session import RealtimeSession
from susurrus.server.realtime.transcriber import Transcriber

CLOSE_GRACE_S = 5.0  # a client that does not answer a close (or read the last events) this long is cut off
FORCE_CLOSE = "susurrus.force_close"  # the ASGI extension of ``uvicorn_ext.WebSocketProtocol``


@dataclass
class Ending:
    """How the server ends a connection: the close ``code`` and ``reason``, the reason queued
    work is dropped for, an ``error`` sent just before the close; ``finish``: commit the open item
    and let the queued work finish first (by ``deadline``, loop time); ``force``: the client is
    not reading, close without waiting for the socket."""

    code: int
    reason: str
    drop: str
    error: ProtocolError | None = None
    finish: bool = False
    force: bool = False
    deadline: float = 0.0
    shutdown: bool = False  # the server is shutting down


class Connection:
    """One accepted WebSocket session on the event loop (see the module docstring)."""

    def __init__(self, ws: WebSocket, state: Any, session: RealtimeSession, transcriber: Transcriber):
        self.ws, self.state, self.session, self.transcriber = ws, state, session, transcriber
        self.limits = state.limits
        self.outbound: asyncio.Queue[str] = asyncio.Queue()
        self.outbound_bytes = 0
        self.works: asyncio.Queue[Work] = asyncio.Queue()
        self.inflight: Future | None = None  # the work running now (or last), in the pool
        self.poke = asyncio.Event()  # something changed: the reader looks again
        self.ending: Ending | None = None
        self.loop = asyncio.get_running_loop()
        self.opened = self.active = self.loop.time()

    # ------------------------------------------------------------------ queues

    def queue(self, events: list[dict[str, Any]], works: list[Work]) -> None:
        forced = self.ending is not None and self.ending.force
        for work in works:  # also when forced: the end drops them and counts their audio
            self.works.put_nowait(work)
        if forced:
            return
        for event in events:
            text = json.dumps(event)
            self.outbound.put_nowait(text)
            self.outbound_bytes += len(text)
        limit = self.limits.max_outbound_bytes
        if limit and self.outbound_bytes > limit:
            self._overflow(limit)

    def _overflow(self, limit: int) -> None:
        """The client stopped reading: free its events now and end the session."""
        while not self.outbound.empty():
            self.outbound.get_nowait()
            self.outbound.task_done()
        self.outbound_bytes = 0
        message = (f"more than {limit} bytes of events waited for the client to read them; the session is closed "
                   "(read events while sending audio)")
        self.ending = Ending(CLOSE_POLICY, "client too slow: events not read", "backpressure",
                             ProtocolError(CLIENT_TOO_SLOW, message, type="server_error"), force=True)
        self.poke.set()

    @property
    def busy(self) -> bool:
        """Work queued or running for the model."""
        return not self.works.empty() or (self.inflight is not None and not self.inflight.done())

    async def _send_loop(self) -> None:
        while True:
            text = await self.outbound.get()
            self.outbound_bytes -= len(text)
            try:
                await self.ws.send_text(text)
            finally:
                self.outbound.task_done()

    async def _work_loop(self) -> None:
        while True:
            work = await self.works.get()
            self.inflight = self.state.pool.submit(self.transcriber.run, work)
            # shielded: a connection that ends while its call still waits for a model thread must
            # not cancel the call, which then runs, finds its item dropped and counts its audio
            result = await asyncio.shield(asyncio.wrap_future(self.inflight))
            self.session.done(work)
            self.active = self.loop.time()
            self.queue(result.events, [])
            for signal in result.signals:
                self.queue(*self.session.turn(signal))
            self.poke.set()

    # ------------------------------------------------------------------ the reader

    def _timer(self) -> tuple[float | None, Ending | None]:
        """The next deadline of this session (loop time) and the ending it brings."""
        when: float | None = None
        ending: Ending | None = None
        if self.limits.idle_s and not self.busy:
            when = self.active + self.limits.idle_s
            ending = Ending(CLOSE_NORMAL, "idle timeout", "client_gone", ProtocolError(
                IDLE_TIMEOUT, f"no client message for {self.limits.idle_s:g} s: the session is closed",
                type="invalid_request_error"))
        if self.limits.max_session_s:
            expires = self.opened + self.limits.max_session_s
            if when is None or expires < when:
                when = expires
                ending = Ending(CLOSE_NORMAL, "session expired", "session_expired", ProtocolError(
                    SESSION_EXPIRED, f"the session reached this server's maximum duration of "
                                     f"{self.limits.max_session_s:g} s: its open item was committed and "
                                     "transcribed; open a new session to go on", type="invalid_request_error"),
                                finish=True, deadline=expires + self.state.drain_s)
        return when, ending

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        worker = asyncio.create_task(self._work_loop())
        self.queue(self.session.opening_events(), [])
        receiving: asyncio.Future | None = None
        gone = False
        try:
            while self.ending is None:
                shutdown = self.state.shutdown
                if shutdown.draining:
                    self.ending = Ending(CLOSE_RESTART, "server shutting down", "drain_deadline", ProtocolError(
                        SERVER_SHUTTING_DOWN, "the server is shutting down", type="server_error"),
                                         finish=True, deadline=shutdown.deadline, shutdown=True)
                    break
                if receiving is None:
                    # always read on: a message left unread would hold the client's keepalive
                    # pings behind it (the session bounds the audio it holds, ``has_room``)
                    receiving = asyncio.ensure_future(self.ws.receive())
                self.poke.clear()
                poked = asyncio.ensure_future(self.poke.wait())
                when, timed = self._timer()
                timeout = None if when is None else max(0.0, when - self.loop.time())
                waits = {poked, sender, worker} | ({receiving} if receiving is not None else set())
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                poked.cancel()
                if sender in done or worker in done:  # the socket failed while sending
                    gone = True
                    break
                if receiving is not None and receiving in done:
                    message = receiving.result()
                    receiving = None
                    if message["type"] == "websocket.disconnect":
                        gone = True
                        break
                    self.active = self.loop.time()
                    data = message.get("text") if message.get("text") is not None else message.get("bytes")
                    self.queue(*self.session.receive(data))
                elif not done and timed is not None and when is not None and self.loop.time() >= when:
                    self.ending = timed
        except WebSocketDisconnect:
            gone = True
        finally:
            if receiving is not None:
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await receiving
        try:
            if not gone and self.ending is not None:
                gone = not await self._end(self.ending, sender, worker)
        finally:
            worker.cancel()
            pending: list[Work] = []
            while not self.works.empty():
                pending.append(self.works.get_nowait())
            reason = "client_gone" if gone or self.ending is None else self.ending.drop
            self.session.close(pending, reason)
            release_streams(self.state, self.transcriber, self.inflight)
            sender.cancel()
            for task in (worker, sender):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # ------------------------------------------------------------------ endings

    async def _end(self, ending: Ending, sender: asyncio.Task, worker: asyncio.Task) -> bool:
        """End the session as ``ending`` says; False if the client went away meanwhile."""
        if ending.finish and not ending.force:
            if self.session.extensions:
                self.queue([server_event("susurrus.warning", message=f"{ending.reason}: no more audio is read; the "
                                                                      "open item is committed and transcribed, then "
                                                                      "the connection closes")], [])
            self.queue(*self.session.finish())
            while self.busy and not (self.ending is not None and self.ending.force):
                deadline = ending.deadline
                if self.state.shutdown.draining:  # the server's drain deadline, which may move earlier
                    deadline = min(deadline, self.state.shutdown.deadline)
                left = deadline - self.loop.time()
                if left <= 0:
                    break
                self.poke.clear()
                poked = asyncio.ensure_future(self.poke.wait())
                done, _ = await asyncio.wait({poked, sender, worker}, timeout=left,
                                             return_when=asyncio.FIRST_COMPLETED)
                poked.cancel()
                if sender in done or worker in done:
                    return False
            if self.ending is not None and self.ending.force:
                ending = self.ending
            elif self.busy:  # the deadline passed: the queued work is dropped, and the client told
                worker.cancel()
                pending = []
                while not self.works.empty():
                    pending.append(self.works.get_nowait())
                self.session.close(pending, ending.drop)
                left_s = sum(w.audio_s for w in pending)
                code = ending.error.code if ending.error else SERVER_SHUTTING_DOWN
                ending.error = ProtocolError(code, f"{ending.reason}: the deadline to finish the session's work "
                                                   f"passed; {left_s:.1f} s of accepted audio was not transcribed",
                                             type="server_error")
            elif ending.shutdown:
                ending.error = None  # all done: the close code says the rest
        if ending.force:
            self._force_close(ending)
            return True
        if ending.error is not None:
            self.state.metrics.error(ending.error.type, ending.error.code)
            self.queue([error_event(ending.error)], [])
        # the last events, then the close, each waiting at most CLOSE_GRACE_S for the client
        flushed = asyncio.ensure_future(self.outbound.join())
        done, _ = await asyncio.wait({flushed, sender}, timeout=CLOSE_GRACE_S, return_when=asyncio.FIRST_COMPLETED)
        flushed.cancel()
        if sender in done:
            return False
        if not done or (self.ending is not None and self.ending.force):
            self._force_close(self.ending if self.ending is not None and self.ending.force else ending)
            return True
        sender.cancel()
        try:
            await asyncio.wait_for(self.ws.close(code=ending.code, reason=ending.reason[:120]), CLOSE_GRACE_S)
        except asyncio.TimeoutError:
            self._force_close(ending, with_error=False)
        except (WebSocketDisconnect, RuntimeError, OSError):
            return False
        return True

    def _force_close(self, ending: Ending, with_error: bool = True) -> None:
        """Put the error and the close frame behind what the socket holds, without waiting; the
        connection is aborted if the client does not answer within :data:`CLOSE_GRACE_S`."""
        close = self.ws.scope.get("extensions", {}).get(FORCE_CLOSE)
        if close is None:  # another server: it closes the transport when the app returns
            return
        texts = []
        if with_error and ending.error is not None:
            self.state.metrics.error(ending.error.type, ending.error.code)
            texts.append(json.dumps(error_event(ending.error)))
        close(ending.code, ending.reason[:120], texts, CLOSE_GRACE_S)


def release_streams(state: Any, transcriber: Transcriber, inflight: Future | None) -> None:
    """Free a closed connection's streams (in the workers: at once) once its running work is done."""
    def release(_: object = None) -> None:
        with contextlib.suppress(RuntimeError):  # the pool is shut down: the workers are gone anyway
            state.pool.submit(transcriber.close)

    if inflight is not None and not inflight.done():
        inflight.add_done_callback(release)
    else:
        release()
