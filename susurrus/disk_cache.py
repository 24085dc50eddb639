"""Where susurrus keeps what it computed once and can read back (``~/.cache/susurrus``, or
``$SUSURRUS_CACHE_DIR``; ``SUSURRUS_CACHE_DIR=off`` keeps nothing), and how a file gets there
whole: written beside its name, then renamed, so that a reader in another process never sees
half a file. Every file is named by a digest of what it was made from: one that no longer fits
is never read, only left behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def root() -> Path | None:
    """The folder the kept files go under; None when keeping is switched off or there is no home
    directory to be found (a service account without one)."""
    chosen = os.environ.get("SUSURRUS_CACHE_DIR", "")
    if chosen.lower() in ("off", "0", "none"):
        return None
    if chosen:
        return Path(chosen)
    try:
        return Path.home() / ".cache" / "susurrus"
    except RuntimeError:
        return None


def write_whole(path: Path, write: Callable[[Path], None]) -> bool:
    """``write(tmp)`` into a file beside ``path``, then renamed to ``path``; False (nothing kept)
    where the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        write(tmp)
        tmp.replace(path)
        return True
    except OSError:
        return False
