"""The server's listening socket, bound before anything is loaded or announced (no heavy imports)."""

from __future__ import annotations

import errno
import socket

# the kernel's receive buffer of each connection (Linux doubles it): small, so that a client sending
# faster than the model keeps up meets flow control after little unread audio (on loopback the
# autotuned buffer grows to megabytes: a minute of audio its keepalive pings would wait behind)
RECEIVE_BUFFER_BYTES = 256 * 1024
# and its send buffer: fixed too, so that what a client that stopped reading holds in the kernel
# is bounded (autotuned it grows to 4 MB a connection) and the server's own outgoing queue
# (``--max-outbound-kb``) fills soon after; events are a few KB a second, far below what it carries
SEND_BUFFER_BYTES = 256 * 1024


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), bound before anything is announced,
    so a busy port fails here, with a clear :class:`OSError`, not after the server says it runs."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise OSError(f"cannot listen on {host}:{port}: unknown host ({err.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)  # accepted sockets inherit it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        reason = "the port is in use (another server?)" if err.errno == errno.EADDRINUSE else err.strerror
        raise OSError(err.errno, f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock
