"""A step's model calls as values: run alone, or packed with other streams' calls.

A stream's step (``StreamSession``'s ``feed_steps``, ``finish_steps`` and what they call) is a
generator: wherever it needs the network it *yields* a call (:class:`EncodeFrames`,
:class:`DecodeTokens`, :class:`CrossKV`) and is sent back the result. Everything between two
calls, the commit policy, the guards, word timing, is the stream's own Python over its own
state. So one step function serves both ways of running:

* :func:`drive` runs one stream's generator, each call alone (``StreamSession.feed``);
* :class:`Lockstep` runs many streams' generators together: every round it takes the call each
  of them is waiting on and runs the calls of a kind as one packed pass
  (:mod:`susurrus.model.batched`), so the weights are read and the per-layer overhead paid once
  per round instead of once per stream. A stream whose step ends early leaves the round; the
  others go on. :class:`~susurrus.streaming.batch.StreamBatch` and the server's workers use it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from susurrus.model import batched
from susurrus.model.caches import KV, DecoderCache, EncoderCache
from susurrus.model.layers import Bf16Linear
from susurrus.model.whisper import Whisper, to_host
from susurrus.streaming.vad import VadFrames

T = TypeVar("T")


@dataclass
class EncodeFrames:
    """New stem frames (1, T, width) through the encoder blocks against ``cache`` under
    ``mask``; result: ``(outputs (1, T, width), extended cache)``."""

    frames: Tensor
    cache: EncoderCache
    mask: Tensor | None


@dataclass
class DecodeTokens:
    """``tokens`` through the decoder after ``cache``; result: ``(hidden (1, T', width), cache,
    alignment-head scores (1, heads, T', 1500), int8 shortlist logits (T', vocab))`` for the
    positions from ``skip`` on (T' = T - skip; a forced prefix needs no logits)."""

    tokens: list[int]
    cache: DecoderCache
    skip: int = 0


@dataclass
class CrossKV:
    """Encoder outputs (1, T, width) projected to every decoder layer's cross keys/values;
    result: ``list[KV]``."""

    features: Tensor


ModelCall = EncodeFrames | DecodeTokens | CrossKV | VadFrames  # VadFrames: streaming/vad.py
Steps = Generator[ModelCall, Any, T]


def _decoded(call: DecodeTokens, hidden: Tensor, cache: DecoderCache, qk: Tensor | None) -> tuple:
    """A call's result but its shortlist logits: the positions from ``skip`` on."""
    return hidden[:, call.skip:], cache, qk[:, :, call.skip:] if qk is not None else None


def _host_reads(decoded: list[tuple], approx: Tensor) -> tuple[list[Tensor | None], Tensor]:
    """The rows' alignment-head scores and their logits where the step's Python reads them: as
    they are on the CPU; from a GPU, two transfers for the whole round (the scores of every row
    concatenated, the logits), not one per token or row. (``qk`` on the host in float32, the
    logits exact: :meth:`~susurrus.model.whisper.TextDecoder.project_approx`.)"""
    if approx.device.type == "cpu":
        return [qk for _, _, qk in decoded], approx
    qks = [qk for _, _, qk in decoded]
    present = [qk for qk in qks if qk is not None]
    if not present:
        return qks, to_host(approx)
    joined = to_host(torch.cat(present, dim=2))
    out, at = [], 0
    for qk in qks:
        if qk is None:
            out.append(None)
            continue
        n = qk.shape[2]
        out.append(joined[:, :, at:at + n])
        at += n
    return out, to_host(approx)


@torch.inference_mode()
def run_alone(net: Whisper, call: ModelCall) -> Any:
    """One call, with the network's own forward passes."""
    if isinstance(call, EncodeFrames):
        return net.encoder.forward_frames(call.frames, call.cache, call.mask)
    if isinstance(call, DecodeTokens):
        tokens = torch.tensor([call.tokens], device=net.device)
        hidden, cache, qk = net.decoder(tokens, call.cache, alignment_heads=net.alignment_heads, project=False)
        hidden, cache, qk = _decoded(call, hidden, cache, qk)
        (qk,), approx = _host_reads([(hidden, cache, qk)], net.decoder.project_approx(hidden[0]))
        return hidden, cache, qk, approx
    if isinstance(call, CrossKV):
        return net.decoder.cross_kv(call.features)
    if isinstance(call, VadFrames):
        return call.vad.run(call.rows)
    raise TypeError(f"not a model call: {call!r}")


@functools.cache
def bf16_packs_exactly(shape: tuple[int, int], threads: int) -> bool:
    """Whether this CPU's bfloat16 matrix kernels give each block of rows of a packed product
    exactly the product of those rows alone, for blocks of 2 or more rows, for a linear layer of
    ``shape`` (out, in) at ``threads`` torch threads: probed on random rows at random offsets of
    packs of up to 3424 rows (32 streams' steps). A product's summation order may depend on how
    many rows it has: measured, oneDNN on AVX512-BF16 rounds only a single row differently (its
    products take another kernel, so :func:`run_together` runs one-frame rows alone), and on AMX
    the layers reading 1536 inputs (an MLP's second layer) round a block differently with the
    rows around it while those reading 384 do not."""
    gen = torch.Generator().manual_seed(0)
    n_out, n_in = shape
    weight = torch.randn(n_out, n_in, generator=gen).to(torch.bfloat16)
    for total in (400, 3424):
        x = torch.randn(total, n_in, generator=gen).to(torch.bfloat16)
        packed = torch.nn.functional.linear(x, weight)
        for rows in (2, 3, 5, 8, 13, 16, 25, 32, 33, 50, 107):
            for start in torch.randint(0, total - rows, (3,), generator=gen).tolist():
                if not torch.equal(torch.nn.functional.linear(x[start:start + rows], weight),
                                   packed[start:start + rows]):
                    return False
    return True


def _bf16_shapes(part: torch.nn.Module) -> set[tuple[int, int]]:
    return {tuple(m.weight.shape) for m in part.blocks.modules() if isinstance(m, Bf16Linear)}


def split_layers(part: torch.nn.Module) -> frozenset[tuple[int, int]]:
    """The shapes of ``part``'s (the encoder's or the decoder's) bfloat16 linear layers whose
    products a packed pass must compute row by row on this CPU (:func:`bf16_packs_exactly`):
    packed, the rest of the pass still reads its weights once per round, and each row's results
    stay those it gets alone. (A part's blocks are bfloat16 throughout or not at all,
    ``quantize_linears``: a float32 layer of the same shape is not split.)"""
    threads = torch.get_num_threads()
    return frozenset(s for s in _bf16_shapes(part) if not bf16_packs_exactly(s, threads))


@dataclass(frozen=True)
class Packing:
    """How :func:`run_together` packs a round's calls on this CPU: the kinds of call that run
    one row at a time (``alone``), and per part the linear layer shapes a packed pass multiplies
    row by row (``encoder_split``, ``decoder_split``)."""

    alone: tuple[type, ...]
    encoder_split: frozenset[tuple[int, int]]
    decoder_split: frozenset[tuple[int, int]]

    @classmethod
    def of(cls, net: Whisper) -> Packing:
        """What ``net``'s layers allow: rows one at a time where a part's blocks run int8
        dynamically quantised linear layers (``compute_type``: each pass quantises its input as
        a whole, so packed, a row's results would depend on the others') or bfloat16 ones of
        which none packs exactly on this CPU; else packed, the layers of :func:`split_layers`
        row by row. Running rows one by one reads the weights once per row (~10 % of the cost
        at 32 streams, docs/journal/2026-12.md); either way each stream's text stays its own."""
        def own_rows(part: torch.nn.Module, split: frozenset[tuple[int, int]]) -> bool:
            if any("quantized" in type(m).__module__ for m in part.blocks.modules()):
                return True
            shapes = _bf16_shapes(part)
            return bool(shapes) and shapes <= split
        enc, dec = split_layers(net.encoder), split_layers(net.decoder)
        alone = (*((EncodeFrames,) if own_rows(net.encoder, enc) else ()),
                 *((DecodeTokens,) if own_rows(net.decoder, dec) else ()))
        return cls(alone, enc, dec)


@dataclass
class KindCost:
    """What one kind of model call cost a :class:`Lockstep` so far: thread seconds, passes (a
    packed pass, or a call run alone, counts one) and calls."""

    seconds: float = 0.0
    passes: int = 0
    calls: int = 0


@torch.inference_mode()
def run_together(net: Whisper, calls: list[ModelCall], packing: Packing | None = None,
                 costs: dict[str, KindCost] | None = None) -> list[Any]:
    """Every call's result, the calls of each kind run as one packed pass, as ``packing``
    (:meth:`Packing.of` ``net`` unless given) allows: the kinds in ``packing.alone`` one by one,
    and in a packed pass the layers of its split shapes row by row. ``costs``, when given, is
    charged each kind's thread time, passes and calls (by the kind's class name)."""
    packing = Packing.of(net) if packing is None else packing
    results: list[Any] = [None] * len(calls)
    kinds: dict[type, list[int]] = {}
    for i, call in enumerate(calls):
        kinds.setdefault(type(call), []).append(i)
    for kind, idx in kinds.items():
        t0 = time.thread_time()
        passes = _run_kind(net, kind, calls, idx, packing, results)
        if costs is not None:
            cost = costs.setdefault(kind.__name__, KindCost())
            cost.seconds += time.thread_time() - t0
            cost.passes += passes
            cost.calls += len(idx)
    return results


def _run_kind(net: Whisper, kind: type, calls: list[ModelCall], idx: list[int], packing: Packing,
              results: list[Any]) -> int:
    """:func:`run_together` for the calls ``idx``, all of ``kind``: their results written into
    ``results``; the number of passes it took."""
    if len(idx) == 1 or kind in packing.alone:
        for i in idx:
            results[i] = run_alone(net, calls[i])
        return len(idx)
    if kind is EncodeFrames:
        # (a one-frame row's products take another kernel than packed rows': it runs alone)
        rows = [i for i in idx if calls[i].frames.shape[1] >= 2]
        if len(rows) < 2:
            rows = []
        for i in set(idx) - set(rows):
            results[i] = run_alone(net, calls[i])
        outs = batched.encode_frames(net.encoder, [(c.frames, c.cache, c.mask) for c in (calls[i] for i in rows)],
                                     packing.encoder_split) if rows else []
        for i, out in zip(rows, outs):
            results[i] = out
        return len(idx) - len(rows) + bool(rows)
    if kind is DecodeTokens:
        decodes = [calls[i] for i in idx]
        decoded = [_decoded(call, *out) for call, out in zip(
            decodes, batched.decode_tokens(net.decoder, [(c.tokens, c.cache) for c in decodes], net.alignment_heads,
                                           packing.decoder_split))]
        # the rows' shortlist logits in one pass (each position quantised on its own scale:
        # the same logits as alone, TextDecoder.project_approx)
        approx = net.decoder.project_approx(torch.cat([hidden[0] for hidden, _, _ in decoded]))
        qks, approx = _host_reads(decoded, approx)
        at = 0
        for i, (hidden, cache, _), qk in zip(idx, decoded, qks):
            n = hidden.shape[1]
            results[i] = (hidden, cache, qk, approx[at:at + n])
            at += n
        return 1
    if kind is CrossKV:
        feats = [calls[i].features for i in idx]
        layers = net.decoder.cross_kv(torch.cat(feats, dim=1))
        at = 0
        for i, f in zip(idx, feats):
            n = f.shape[1]
            results[i] = [KV(kv.k[:, at:at + n], kv.v[:, at:at + n]) for kv in layers]
            at += n
        return 1
    if kind is VadFrames:
        by_vad: dict[int, list[int]] = {}
        for i in idx:
            by_vad.setdefault(id(calls[i].vad), []).append(i)
        for group in by_vad.values():
            outs = calls[group[0]].vad.frames_together([row for i in group for row in calls[i].rows])
            for i in group:  # each stream's readings, in order
                results[i], outs = outs[:len(calls[i].rows)], outs[len(calls[i].rows):]
        return len(by_vad)
    raise TypeError(f"not a model call: {calls[idx[0]]!r}")


def drive(net: Whisper, steps: Steps[T]) -> T:
    """Run one generator of model calls to its end, each call alone; its return value."""
    try:
        call = next(steps)
        while True:
            call = steps.send(run_alone(net, call))
    except StopIteration as stop:
        return stop.value


class Lockstep:
    """Many generators of model calls run together, round by round.

    ``add(steps, done)`` starts one; when it ends, ``done(value, error, compute_s)`` is called
    with its return value (or ``None`` and the exception it raised) and the compute it took: the
    thread time of its own resumptions plus an equal share of each packed round it took part
    in. Each :meth:`round` runs the calls that every live generator waits on as packed passes
    and resumes them. A generator that raises ends alone; if a packed pass itself fails, its
    calls are run one by one so that only the call that fails reaches its generator."""

    def __init__(self, net: Whisper):
        self.net = net
        self._packing = Packing.of(net)  # what runs row by row on this CPU (int8 parts, some bf16 layers)
        self._live: list[_Live] = []
        self.rounds = 0  # rounds run so far
        self.calls = 0  # calls run so far (calls / rounds: how many streams a round carried)
        self.costs: dict[str, KindCost] = {}  # per kind of call: thread time, passes, calls

    def __len__(self) -> int:
        return len(self._live)

    def add(self, steps: Steps[Any], done: Callable[[Any, BaseException | None, float], None],
            urgent: bool = False) -> None:
        """Start ``steps``; ``urgent`` (the end of an item a client waits for): while any urgent
        generator is live, a round runs only the urgent ones, so that a commit's last decode
        does not wait behind a round of other streams' steps (which wait a round or two)."""
        self._advance(_Live(steps, None, done, urgent=urgent), None, None)

    def _advance(self, live: _Live, value: Any, error: BaseException | None) -> None:
        t0 = time.thread_time()
        try:
            live.call = live.steps.throw(error) if error is not None else live.steps.send(value)  # send(None) starts
        except StopIteration as stop:
            live.compute += time.thread_time() - t0
            live.done(stop.value, None, live.compute)
            return
        except Exception as err:  # noqa: BLE001 - this generator's failure, not the round's
            live.compute += time.thread_time() - t0
            live.done(None, err, live.compute)
            return
        live.compute += time.thread_time() - t0
        self._live.append(live)

    def round(self) -> int:
        """Run one round; the number of calls it ran."""
        live, self._live = self._live, []
        if not live:
            return 0
        if any(entry.urgent for entry in live):
            self._live = [entry for entry in live if not entry.urgent]  # they wait for the next round
            live = [entry for entry in live if entry.urgent]
        calls = [entry.call for entry in live]
        t0 = time.thread_time()
        try:
            results: list[Any] = run_together(self.net, calls, self._packing, self.costs)
            errors: list[BaseException | None] = [None] * len(calls)
        except Exception:  # noqa: BLE001 - find the call that fails
            results, errors = [], []
            for call in calls:
                try:
                    results.append(run_alone(self.net, call))
                    errors.append(None)
                except Exception as err:  # noqa: BLE001
                    results.append(None)
                    errors.append(err)
        share = (time.thread_time() - t0) / len(calls)
        self.rounds += 1
        self.calls += len(calls)
        for entry, result, error in zip(live, results, errors):
            entry.compute += share
            self._advance(entry, result, error)
        return len(calls)


@dataclass
class _Live:
    """A generator in a :class:`Lockstep`: the call it waits on, its callback, its compute."""

    steps: Steps[Any]
    call: ModelCall | None
    done: Callable[[Any, BaseException | None, float], None]
    compute: float = 0.0
    urgent: bool = False
