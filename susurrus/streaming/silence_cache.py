"""The encoder's pass over a window of digital silence, kept on disk between processes.

Every stream reads the encoder's keys/values and output over 30 s of silence
(:func:`~susurrus.streaming.encoder.silence_encoding`): a constant of the weights, but a whole
window's encode to make (~1.5 s for tiny.en on one core, ~3 s for base, a minute for large-v3 on
a CPU), paid again by every process that loads a model: the command line at each start, each
worker of the server. On the CPU it is kept in ``~/.cache/susurrus/silence`` (or
``$SUSURRUS_CACHE_DIR/silence``; ``SUSURRUS_CACHE_DIR=off`` keeps nothing) and read back
instead (tiny.en: 21 MB, ~0.05 s).

A file is found only by a digest of everything the numbers depend on: the encoder's tensors as
they are used (dtype, int8 packing included), its modules' kinds, the source of the code that
runs the pass, the level, torch's version, the CPU's instruction set and the torch threads
(float sums are blocked by thread). Change any and the digest changes: a stale file is never read,
only left behind, and the least recently used beyond :data:`KEEP_BYTES` are removed. On a GPU
the pass takes milliseconds and is made as before.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from susurrus import disk_cache
from susurrus.model import layers, whisper

KEEP_BYTES = 512 << 20  # kept at most (tiny.en 21 MB a file, base 40 MB): the least recently used go


def cache_dir() -> Path | None:
    """Where the silence encodings are kept (:func:`susurrus.disk_cache.root`'s ``silence``);
    None when keeping is switched off."""
    root = disk_cache.root()
    return None if root is None else root / "silence"


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_quantized:
            h.update(str(t.qscheme()).encode())
            if t.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
                _feed(h, t.q_per_channel_scales())
                _feed(h, t.q_per_channel_zero_points())
            else:
                h.update(repr((t.q_scale(), t.q_zero_point())).encode())
            t = t.int_repr()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, (tuple, list)):
        for v in value:
            _feed(h, v)
    else:
        h.update(repr(value).encode())


def digest(encoder: torch.nn.Module, level: float) -> str:
    """What the silence encoding of ``encoder`` at ``level`` depends on, as a hex digest."""
    h = hashlib.sha256()
    for source in (whisper.__file__, layers.__file__, Path(__file__).with_name("encoder.py")):
        h.update(Path(source).read_bytes())
    h.update(repr((level, torch.__version__, torch.backends.cpu.get_cpu_capability(),
                   torch.get_num_threads())).encode())
    for name, module in encoder.named_modules():
        h.update(f"{name}:{type(module).__qualname__}:{getattr(module, 'dtype', None)}".encode())
    for name, value in encoder.state_dict().items():
        h.update(name.encode())
        _feed(h, value)
    return h.hexdigest()[:24]


def load(key: str):
    """The kept ``(keys, output)`` for ``key``, or None (absent, unreadable, switched off)."""
    folder = cache_dir()
    if folder is None:
        return None
    path = folder / f"{key}.pt"
    try:
        made = torch.load(path, map_location="cpu", weights_only=True)
        os.utime(path)  # recently used: kept longest
    except Exception:  # absent, half-written by a process that died, or from another torch
        return None
    return made


def save(key: str, made) -> None:
    """Keep ``made`` for ``key`` (:func:`susurrus.disk_cache.write_whole`), then remove the least
    recently used beyond :data:`KEEP_BYTES`; where the folder cannot be written, nothing is kept."""
    folder = cache_dir()
    if folder is None:
        return
    if not disk_cache.write_whole(folder / f"{key}.pt", lambda tmp: torch.save(made, tmp)):
        return
    try:
        total = 0
        for path in sorted(folder.glob("*.pt"), key=lambda p: p.stat().st_mtime, reverse=True):
            total += path.stat().st_size
            if total > KEEP_BYTES:
                path.unlink(missing_ok=True)
    except OSError:  # another process removed one meanwhile: its own save trims again
        pass
