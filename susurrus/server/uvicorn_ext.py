"""What the server adds to uvicorn: a WebSocket protocol that can close a connection whose client
stopped reading (``FORCE_CLOSE``), and a server that drains the app before uvicorn's own
shutdown closes the connections (``DrainingServer``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

# the ASGI scope extension: ``scope["extensions"][FORCE_CLOSE](code, reason, texts, grace_s)``
FORCE_CLOSE = "susurrus.force_close"


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets (sans-I/O) protocol with the :data:`FORCE_CLOSE` extension.

    An ASGI ``websocket.send`` or ``websocket.close`` waits while the transport's write buffer is
    full, that is, forever for a client that stopped reading. ``force_close`` puts ``texts`` and
    the close frame behind what is already buffered without waiting (a client that reads again
    gets them, then the close code and reason), and aborts the connection if the client has not
    answered the close within ``grace_s``; the app can then return and free the session at once."""

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][FORCE_CLOSE] = self.force_close

    def force_close(self, code: int, reason: str, texts: list[str], grace_s: float) -> None:
        if self.close_sent or self.disconnected or self.transport.is_closing():
            return
        for text in texts:
            self.conn.send_text(text.encode())
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        if self.read_paused:  # read on, so the client's close answer is seen
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(grace_s, self.transport.abort)


class DrainingServer(uvicorn.Server):
    """uvicorn's server whose shutdown (SIGTERM, SIGINT, ``should_exit``) first awaits
    ``drain(forced)`` (the app finishes its open work, ``forced()`` true after a second Ctrl+C),
    while the listening socket still answers: new sessions and uploads get a clear refusal,
    ``/healthz`` says ``draining``. Then uvicorn closes what is left and the lifespan ends."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[Callable[[], bool]], Awaitable[None]]):
        super().__init__(config)
        self._drain = drain

    async def shutdown(self, sockets: Any = None) -> None:
        await self._drain(lambda: self.force_exit)
        await super().shutdown(sockets)
