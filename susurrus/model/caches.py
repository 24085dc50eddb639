"""The caches the model reads and returns: values passed in and out of its calls, never kept in
a module (:mod:`susurrus.model.whisper`).

* :class:`KV` holds one attention layer's keys and values, shape (batch, time, width), as a view
  of an append-only :class:`KVStore`.
* :class:`HeadKV` holds them head by head, shape (batch, heads, time, head width): the layout
  attention reads (a stream's cross-attention buffer keeps its keys/values so).
* :class:`PartedKV` is keys/values kept as consecutive parts and read as one (a stream's own
  cross-attention frames, then the silence every stream shares).
* :class:`EncoderCache`: the encoder's per-layer keys/values of frames already encoded.
* :class:`DecoderCache`: the decoder's cross-attention keys/values and the self-attention
  keys/values of the tokens so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor


class KVStore:
    """Append-only storage behind :class:`KV` views: keys and values (batch, capacity, width)
    and how many positions hold data (``filled``). A cache that grows step after step (the
    streaming encoder's frames, the decoder's tokens) then writes each step's positions in place
    and is reallocated, with room to spare, only now and then, instead of being copied whole at
    every step (the copies cost time, and their ever-changing sizes fragment a long-running
    process's heap)."""

    __slots__ = ("k", "v", "filled")

    def __init__(self, k: Tensor, v: Tensor, filled: int):
        self.k, self.v, self.filled = k, v, filled


@dataclass
class KV:
    """Keys and values of one attention layer, each (batch, time, width).

    A value: :meth:`append` never changes what an existing ``KV`` holds. It writes in place
    only past every position any view of its :class:`KVStore` has seen (``store.filled``), and
    copies otherwise. :meth:`keep` is the one exception to "any view": use it where the longer
    views of the same cache are dead (a step's result cut back to what it keeps)."""

    k: Tensor
    v: Tensor
    store: KVStore | None = field(default=None, repr=False, compare=False)

    @property
    def length(self) -> int:
        return self.k.shape[1]

    def append(self, k: Tensor, v: Tensor) -> KV:
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad or self.k.requires_grad):
            return KV(torch.cat([self.k, k], dim=1), torch.cat([self.v, v], dim=1))  # autograd: no in-place writes
        with torch.inference_mode():  # the store may have been made there (a stream's step) or not
            return self._append(k, v)

    def _append(self, k: Tensor, v: Tensor) -> KV:
        n0, n = self.length, k.shape[1]
        store = self.store
        if store is None or store.filled != n0 or n0 + n > store.k.shape[1]:
            # a new store, with room for the next appends (a quarter more, and at least this one again)
            capacity = n0 + n + max(n, (n0 + n) // 4)
            b, width = self.k.shape[0], self.k.shape[2]
            store = KVStore(self.k.new_empty((b, capacity, width)), self.v.new_empty((b, capacity, width)), n0)
            store.k[:, :n0] = self.k
            store.v[:, :n0] = self.v
        store.k[:, n0:n0 + n] = k
        store.v[:, n0:n0 + n] = v
        store.filled = n0 + n
        return KV(store.k[:, :n0 + n], store.v[:, :n0 + n], store)

    def select(self, index: Tensor) -> KV:
        return KV(self.k.index_select(0, index), self.v.index_select(0, index))

    def narrow(self, start: int, length: int) -> KV:
        return KV(self.k[:, start:start + length], self.v[:, start:start + length],
                  self.store if start == 0 else None)

    def keep(self, length: int) -> KV:
        """The first ``length`` positions, whose store the next :meth:`append` may extend in
        place: every longer view of this cache must be dead (it would see that append)."""
        if self.store is not None and self.store.filled >= length:
            self.store.filled = length
        return self.narrow(0, length)


@dataclass
class HeadKV:
    """Keys and values of one attention layer stored head by head, each (batch, heads, time,
    head width): the layout attention reads. Kept so (:meth:`of` copies once), a query's
    product with a head's keys reads one contiguous block instead of a strided slice of every
    row; the arithmetic is the same (tests/test_cross_buffer.py checks the bits)."""

    k: Tensor
    v: Tensor

    @classmethod
    def of(cls, kv: KV, n_head: int) -> HeadKV:
        """A head-by-head copy of ``kv``."""
        return cls(heads_of(kv.k, n_head).contiguous(), heads_of(kv.v, n_head).contiguous())

    @property
    def length(self) -> int:
        return self.k.shape[2]

    def narrow(self, start: int, length: int) -> HeadKV:
        return HeadKV(self.k[:, :, start:start + length], self.v[:, :, start:start + length])


def heads_of(x: Tensor, n_head: int) -> Tensor:
    """(batch, time, width) as (batch, heads, time, head width): a view, no copy."""
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)


class PartedKV:
    """Keys/values kept as consecutive parts and read as one: a stream's cross-attention keeps
    its own frames apart from the encoder output of silence behind them, which every stream
    shares instead of holding a copy (:class:`~susurrus.streaming.state.CrossBuffer`). Attention
    over the parts equals attention over their concatenation up to float rounding (the matrix
    products are blocked differently, the values' weighted sum is added part by part), and reads
    no copy of the shared part.
    ``k``/``v``: the first part's storage (its dtype and batch)."""

    k: Tensor
    v: Tensor

    def parts(self) -> list[HeadKV]:
        """The non-empty parts, in order, each head by head."""
        raise NotImplementedError

    def shared(self) -> tuple[HeadKV, int] | None:
        """``(whole, start)`` when the last part is ``whole`` from position ``start`` on and
        ``whole`` is read by other rows too (a packed pass multiplies all their queries with it
        at once, :mod:`~susurrus.model.batched`); else None."""
        return None


@dataclass
class EncoderCache:
    """Per-layer keys/values of the encoder frames already encoded (streaming encoder)."""

    layers: list[KV | None]

    @classmethod
    def empty(cls, n_layer: int) -> EncoderCache:
        return cls([None] * n_layer)

    @property
    def length(self) -> int:
        first = self.layers[0]
        return 0 if first is None else first.length

    def narrow(self, start: int, length: int) -> EncoderCache:
        return EncoderCache([None if kv is None else kv.narrow(start, length) for kv in self.layers])


@dataclass
class DecoderCache:
    """Decoder state for one batch of hypotheses.

    ``cross`` is the per-layer cross-attention keys/values of the audio (computed once per
    window and shared by all steps); ``self_kv`` the per-layer self-attention keys/values of
    the tokens decoded so far (``None`` before the first call).
    """

    cross: list[KV]
    self_kv: list[KV | None]

    @property
    def offset(self) -> int:
        first = self.self_kv[0]
        return 0 if first is None else first.length

    def select(self, index: Tensor) -> DecoderCache:
        """Reorder/duplicate hypotheses (beam search); cross keys are expanded lazily."""
        cross = self.cross
        if cross[0].k.shape[0] != 1:
            cross = [kv.select(index) for kv in cross]
        return DecoderCache(cross, [None if kv is None else kv.select(index) for kv in self.self_kv])

    def rewind(self, length: int, keep: bool = False) -> DecoderCache:
        """Drop self-attention keys/values past ``length`` tokens. ``keep``: :meth:`KV.keep`, so
        that the next tokens are written in place (every longer view of this cache is dead)."""
        return replace(self, self_kv=[None if kv is None or length == 0 else kv.keep(length) if keep
                                      else kv.narrow(0, length) for kv in self.self_kv])
