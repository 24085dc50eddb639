"""What a GPU would launch and wait for, counted on a CPU.

Every op PyTorch dispatches is a kernel launch on a GPU (5-10 us each in eager mode, whatever
its size), and every read of a tensor's values on the host (``.item()``, ``.tolist()``,
``.numpy()``) is a device-to-host synchronisation where that tensor lives on the GPU. Neither
depends on the device, so both can be counted here: :func:`counting` runs a block under a
``TorchDispatchMode`` that counts each op, and counts the host reads, each under the model call
being run (``EncodeFrames``, ``DecodeTokens``, ... from :mod:`susurrus.streaming.calls`, or
``stream`` for a stream's own work between its calls: the mel frames, the logit rules, the
commit policy). ``benchmarks/batched_engine.py --ops`` prints the table (docs/benchmarks.md,
"GPU").

Device-to-host copies are counted where the engine makes them, ``calls._host_reads``: on a GPU
it copies a decoder pass's logits, and its rows' alignment scores when any row has some (on a
CPU it copies nothing, so the count is of what a GPU would copy). Host-to-device copies (the
tokens, the stem's input) are not counted: on a CPU they are no ops. A host read under a model
call would be a synchronisation in the middle of a pass on a GPU; one under ``stream`` reads what
the copies brought over (or the host's own features), no wait on a GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = ("item", "tolist", "numpy")  # the Tensor methods that read values on the host


@dataclass
class Counts:
    """Ops and host reads counted by :func:`counting`, each by the model call it ran under."""

    ops: Counter = field(default_factory=Counter)  # part -> ops
    by_op: Counter = field(default_factory=Counter)  # (part, aten op) -> ops
    reads: Counter = field(default_factory=Counter)  # part -> host reads
    calls: Counter = field(default_factory=Counter)  # part -> packed passes run
    transfers: Counter = field(default_factory=Counter)  # part -> device-to-host copies a GPU would make
    part: str = "stream"

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def host_reads(self) -> int:
        return sum(self.reads.values())


class _Mode(TorchDispatchMode):
    def __init__(self, counts: Counts):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        c = self.counts
        c.ops[c.part] += 1
        c.by_op[(c.part, str(func.overloadpacket))] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting() -> Iterator[Counts]:
    """Count the ops dispatched and the host reads made in the block (one thread: the counts
    are this process's, so run nothing else meanwhile)."""
    from susurrus.streaming import calls

    counts = Counts()
    run_kind = calls._run_kind
    methods = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def by_kind(net: Any, kind: type, *args: Any) -> Any:
        before, counts.part = counts.part, kind.__name__
        counts.calls[kind.__name__] += 1
        try:
            return run_kind(net, kind, *args)
        finally:
            counts.part = before

    def reading(name: str) -> Any:
        method = methods[name]

        def read(self: torch.Tensor, *a: Any, **k: Any) -> Any:
            counts.reads[counts.part] += 1
            return method(self, *a, **k)
        return read

    host_reads = calls._host_reads

    def transfer(decoded: list[tuple], approx: torch.Tensor) -> Any:
        counts.transfers[counts.part] += 1 + any(qk is not None for _, _, qk in decoded)
        return host_reads(decoded, approx)

    calls._run_kind = by_kind  # type: ignore[assignment]
    calls._host_reads = transfer  # type: ignore[assignment]
    for name in HOST_READS:
        setattr(torch.Tensor, name, reading(name))
    try:
        with _Mode(counts):
            yield counts
    finally:
        calls._run_kind = run_kind  # type: ignore[assignment]
        calls._host_reads = host_reads  # type: ignore[assignment]
        for name, method in methods.items():
            setattr(torch.Tensor, name, method)
