"""Who may use the server: the API key (compared in constant time, for the WebSocket and REST
alike) and the WebSocket ``Origin`` allow-list (``susurrus serve --allowed-origins``)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def key_matches(offered: str | None, expected: str) -> bool:
    """Whether ``offered`` is the API key, in time independent of where they differ (a timing
    side channel must not reveal the key a character at a time)."""
    if offered is None:
        return False
    return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


def parse_origins(text: str | None) -> tuple[str, ...] | None:
    """``--allowed-origins`` (comma-separated origins like ``https://app.example.com``, or ``*``)
    as normalised origins; None (or empty) for the default: same-origin only. Raises ValueError
    for an entry that is not an origin (``scheme://host[:port]``, no path)."""
    if text is None or not text.strip():
        return None
    out = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == "*":
            out.append("*")
            continue
        origin = normalise_origin(entry)
        if origin is None:
            raise ValueError(f"{entry!r} is not an origin: give scheme://host[:port], e.g. https://app.example.com")
        out.append(origin)
    return tuple(out) or None


def normalise_origin(value: str) -> str | None:
    """``scheme://host:port`` in lower case with the port made explicit, or None if ``value`` is
    not an origin (``null``, a path, no host)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in DEFAULT_PORTS or not host or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def origin_allowed(headers: Mapping[str, str], scheme: str, allowed: Iterable[str] | None) -> bool:
    """The WebSocket handshake's ``Origin`` against the allow-list. No ``Origin`` header: allowed
    (not a browser: browsers always send one, so it cannot be a page of another site). Same
    origin as the server (the origin's host and port are the request's ``Host``, http for ws and
    https for wss): allowed. Otherwise only an origin in ``allowed`` (``*``: any)."""
    origin = headers.get("origin")
    if origin is None:
        return True
    allowed = tuple(allowed or ())
    if "*" in allowed:
        return True
    normal = normalise_origin(origin)
    if normal is None:  # "null" (a sandboxed page, a file://) and anything malformed
        return False
    if normal in allowed:
        return True
    own = "https" if scheme in ("wss", "https") else "http"
    host = headers.get("host", "")
    return normal == normalise_origin(f"{own}://{host}")
