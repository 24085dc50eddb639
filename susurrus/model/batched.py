"""Many streams' encoder and decoder passes in one: ragged rows packed, not padded.

Each *row* is one stream's call: its new positions (encoder frames or decoder tokens) and its
own cache (earlier frames' or tokens' keys/values, and for the decoder its audio's
cross-attention keys/values). The rows' positions are packed into one ``(positions, width)``
matrix, so every linear layer, layer norm and MLP runs once for the batch and reads its weights
once; attention, the only part that mixes positions, runs per row over that row's own cache,
with the same shapes and masks as the row alone, except that the decoder's cross-attention
reads the silence behind every stream's frames, which the streams share, once for all rows
(:func:`_cross_mix`). Nothing is padded, so no row's length or cache costs the others anything.

With one row this is the same arithmetic as :meth:`AudioEncoder.forward_frames` and
:meth:`TextDecoder.forward`; with many, a row's results differ from its results alone only by
the matrix multiplications' summation order for a different number of rows (measured in
``tests/test_batched.py`` and docs/benchmarks.md). Float layers only: an int8 layer quantises
its input per pass, so packed rows would change each other's results (``calls.run_together``
runs such parts row by row). A linear layer whose shape is in ``split`` multiplies each row's
block on its own (the other layers still packed): on some CPUs a bfloat16 product rounds a block
of rows differently with the number of rows around it, for some layer shapes only
(``calls.split_layers``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
from torch import Tensor, nn

from susurrus.model.caches import KV, DecoderCache, EncoderCache, HeadKV, PartedKV, heads_of
from susurrus.model.whisper import AudioEncoder, MultiHeadAttention, ResidualAttentionBlock, TextDecoder

Shapes = Collection[tuple[int, int]]  # linear layers' weight shapes (out, in)


def _spans(lengths: Sequence[int]) -> list[tuple[int, int]]:
    out, at = [], 0
    for n in lengths:
        out.append((at, at + n))
        at += n
    return out


def _split(layer: nn.Module, split: Shapes) -> bool:
    return bool(split) and tuple(layer.weight.shape) in split


def _linear(layer: nn.Module, x: Tensor, spans: list[tuple[int, int]], split: Shapes) -> Tensor:
    """``layer(x)``; for a layer of a shape in ``split``, each row's block through it on its own."""
    if len(spans) < 2 or not _split(layer, split):
        return layer(x)
    return torch.cat([layer(x[a:b]) for a, b in spans])


def _keys_values(attn: MultiHeadAttention, h: Tensor, spans: list[tuple[int, int]], split: Shapes) -> KV:
    """``attn.project_kv(h)``, row by row where its key or value layer's shape is in ``split``."""
    if len(spans) < 2 or not (_split(attn.key, split) or _split(attn.value, split)):
        return attn.project_kv(h)
    rows = [attn.project_kv(h[a:b]) for a, b in spans]
    return KV(torch.cat([kv.k for kv in rows]), torch.cat([kv.v for kv in rows]))


def _block(block: ResidualAttentionBlock, x: Tensor, spans: list[tuple[int, int]], pasts: Sequence[KV | None],
           masks: Sequence[Tensor | None], crosses: Sequence[KV] | None = None, need_weights: bool = False,
           split: Shapes = (),
           ) -> tuple[Tensor, list[KV], list[Tensor | None]]:
    """One residual block over packed rows ``x`` (positions, width): each row's positions
    ``spans[i]`` attend to its ``pasts[i]`` and to each other under ``masks[i]`` (and cross-attend
    to ``crosses[i]``); the linear layers of a shape in ``split`` multiply row by row. Returns
    the output, each row's self-attention keys/values including its new positions, and each
    row's cross-attention scores (with ``need_weights``)."""
    attn = block.attn
    h = attn.projected(block.attn_ln(x))
    q, new = _linear(attn.query, h, spans, split), _keys_values(attn, h, spans, split)
    k, v = new.k, new.v
    mixed, kvs = [], []
    for (a, b), past, mask in zip(spans, pasts, masks):
        kv = KV(k[None, a:b], v[None, a:b]) if past is None else past.append(k[None, a:b], v[None, a:b])
        kvs.append(kv)
        mixed.append(attn.mix(q[None, a:b], kv, mask)[0][0])
    x = x + _linear(attn.out, torch.cat(mixed), spans, split)
    scores: list[Tensor | None] = [None] * len(spans)
    if block.cross_attn is not None and crosses is not None:
        cross = block.cross_attn
        q = cross.query(block.cross_attn_ln(x))
        mixed, scores = _cross_mix(cross, q, spans, crosses, need_weights)
        x = x + _linear(cross.out, torch.cat(mixed), spans, split)
    up, act, down = block.mlp
    x = x + _linear(down, act(_linear(up, block.mlp_ln(x), spans, split)), spans, split)
    return x, kvs, scores


def _cross_mix(attn: MultiHeadAttention, q: Tensor, spans: list[tuple[int, int]], crosses: Sequence[KV],
               need_weights: bool) -> tuple[list[Tensor], list[Tensor | None]]:
    """Each row's cross-attention (``attn.mix`` of its queries ``q[a:b]`` over ``crosses[i]``):
    its weighted values (T, width) and, with ``need_weights``, its scores. Rows whose keys/values
    end in the same shared part (:meth:`PartedKV.shared`: the silence behind every stream's own
    frames) multiply their queries with it in one product, and their weights with its values in
    another, so that it is read once per pass, not once per row (each row's own frames and its
    softmax stay its own; a row reads the shared part from its own start, the rest of its row
    of the weights is zero)."""
    mixed: list[Tensor | None] = [None] * len(spans)
    scores: list[Tensor | None] = [None] * len(spans)
    groups: dict[int, tuple[HeadKV, list[tuple[int, int]]]] = {}
    for i, kv in enumerate(crosses):
        shared = kv.shared() if isinstance(kv, PartedKV) else None
        if shared is not None:
            groups.setdefault(id(shared[0].k), (shared[0], []))[1].append((i, shared[1]))
    for whole, group in groups.values():
        for rows in _bounded(group, spans):
            if len(rows) >= 2:
                _shared_rows(attn, q, spans, crosses, whole, rows, need_weights, mixed, scores)
    for i, ((a, b), kv) in enumerate(zip(spans, crosses)):
        if mixed[i] is None:
            out, scores[i] = attn.mix(q[None, a:b], kv, need_weights=need_weights)
            mixed[i] = out[0]
    return mixed, scores  # type: ignore[return-value]


# at most this many queries in one product with a shared part: its scores and weights are
# (heads, queries, 1500) each; a round of streams that all decode a long prefix would otherwise
# hold hundreds of MB of them at once
SHARED_QUERIES = 256


def _bounded(rows: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``rows`` in consecutive runs of at most :data:`SHARED_QUERIES` queries (a longer row alone)."""
    runs: list[list[tuple[int, int]]] = [[]]
    count = 0
    for row in rows:
        t = spans[row[0]][1] - spans[row[0]][0]
        if runs[-1] and count + t > SHARED_QUERIES:
            runs.append([])
            count = 0
        runs[-1].append(row)
        count += t
    return runs


def _shared_rows(attn: MultiHeadAttention, q: Tensor, spans: list[tuple[int, int]], crosses: Sequence[KV],
                 whole: HeadKV, rows: list[tuple[int, int]], need_weights: bool,
                 mixed: list[Tensor | None], scores: list[Tensor | None]) -> None:
    """:func:`_cross_mix` for ``rows`` ``(index, start)`` that all end in ``whole`` from their
    ``start`` on: their results written into ``mixed`` and ``scores``."""
    h, width = attn.n_head, q.shape[-1]
    qh = heads_of(torch.cat([q[spans[i][0]:spans[i][1]] for i, _ in rows])[None].to(whole.k.dtype), h)
    common = qh @ whole.k.transpose(-1, -2)  # (1, heads, T, positions): every row's queries
    weights = torch.zeros_like(common)
    own_out, at = [], 0
    for i, start in rows:
        t = spans[i][1] - spans[i][0]
        own = crosses[i].parts()[:-1]  # type: ignore[attr-defined]  (a PartedKV: its own frames)
        qi = qh[:, :, at:at + t]
        row = torch.cat([qi @ kv.k.transpose(-1, -2) for kv in own] + [common[:, :, at:at + t, start:]],
                        dim=-1) * (width // h) ** -0.5
        w = row.float().softmax(dim=-1).to(whole.k.dtype)
        out, n = None, 0
        for kv in own:
            part = w[..., n:n + kv.length] @ kv.v
            out, n = part if out is None else out + part, n + kv.length
        weights[:, :, at:at + t, start:] = w[..., n:]
        own_out.append(out)
        scores[i] = row.detach() if need_weights else None
        at += t
    values = weights @ whole.v  # the shared part's weighted values, every row's in one product
    at = 0
    for (i, _), out in zip(rows, own_out):
        t = spans[i][1] - spans[i][0]
        part = values[:, :, at:at + t]
        mixed[i] = (part if out is None else out + part).transpose(1, 2).reshape(t, width).to(q.dtype)
        at += t


def encode_frames(encoder: AudioEncoder, rows: Sequence[tuple[Tensor, EncoderCache, Tensor | None]],
                  split: Shapes = ()) -> list[tuple[Tensor, EncoderCache]]:
    """:meth:`AudioEncoder.forward_frames` for many rows ``(frames (1, T, width), cache, mask)``
    at once: each row's outputs (1, T, width) and its cache extended by them. The linear layers
    of a shape in ``split`` multiply row by row."""
    spans = _spans([f.shape[1] for f, _, _ in rows])
    pos = encoder.positional_embedding
    x = torch.cat([f[0] + pos[c.length:c.length + f.shape[1]].to(f.dtype) for f, c, _ in rows])
    masks = [m for _, _, m in rows]
    layers: list[list[KV]] = []
    for n, block in enumerate(encoder.blocks):
        x, kvs, _ = _block(block, x, spans, [c.layers[n] for _, c, _ in rows], masks, split=split)
        layers.append(kvs)
    x = encoder.ln_post(x)
    return [(x[None, a:b], EncoderCache([layer[i] for layer in layers])) for i, (a, b) in enumerate(spans)]


def decode_tokens(decoder: TextDecoder, rows: Sequence[tuple[Sequence[int], DecoderCache]],
                  alignment_heads: Tensor, split: Shapes = ()) -> list[tuple[Tensor, DecoderCache, Tensor | None]]:
    """:meth:`TextDecoder.forward` (``project=False``, with ``alignment_heads``) for many rows
    ``(tokens, cache)`` at once: each row's final hidden states (1, T, width), its cache
    extended by its tokens, and its alignment heads' cross-attention scores (1, heads, T, 1500). The
    linear layers of a shape in ``split`` multiply row by row."""
    spans = _spans([len(t) for t, _ in rows])
    ids = torch.tensor([t for tokens, _ in rows for t in tokens], device=decoder.token_embedding.weight.device)
    offsets = [c.offset for _, c in rows]
    pos = torch.cat([decoder.positional_embedding[o:o + len(t)] for o, (t, _) in zip(offsets, rows)])
    x = (decoder.token_embedding(ids) + pos).to(rows[0][1].cross[0].k.dtype)
    masks = [None if len(t) == 1 else
             torch.full((len(t), o + len(t)), float("-inf"), dtype=x.dtype, device=x.device).triu_(o + 1)
             for o, (t, _) in zip(offsets, rows)]
    self_kv: list[list[KV]] = []
    picked: list[list[Tensor]] = [[] for _ in rows]
    for n, block in enumerate(decoder.blocks):
        heads = alignment_heads[n]
        need = bool(heads.any())
        x, kvs, scores = _block(block, x, spans, [c.self_kv[n] for _, c in rows], masks,
                                [c.cross[n] for _, c in rows], need_weights=need, split=split)
        self_kv.append(kvs)
        if need:
            for i, s in enumerate(scores):
                picked[i].append(s[:, heads])
    x = decoder.ln(x)
    return [(x[None, a:b], DecoderCache(c.cross, [layer[i] for layer in self_kv]),
             torch.cat(picked[i], dim=1) if picked[i] else None)
            for i, ((a, b), (_, c)) in enumerate(zip(spans, rows))]
