"""A `susurrus serve` for a benchmark: a free loopback port, the server as a child process, and
a wait until its ``/healthz`` answers (or a clear exit if it dies or never answers)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server: subprocess.Popen, port: int, timeout_s: float = 300.0) -> None:
    """Return once ``http://127.0.0.1:PORT/healthz`` answers; exit if the server exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode})")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"the server did not answer /healthz within {timeout_s:.0f} s")


def start_server(options: list[str], code: Path = REPO, env: dict[str, str] | None = None,
                 log: IO | int | None = None) -> tuple[subprocess.Popen, int]:
    """``python -m susurrus serve --port P *options`` run from ``code`` (a checkout), healthy."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "susurrus", "serve", "--port", str(port), *options], cwd=code,
                              env=env, stdout=log, stderr=subprocess.STDOUT if log is not None else None)
    wait_healthy(server, port)
    return server, port
