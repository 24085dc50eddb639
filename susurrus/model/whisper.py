"""Whisper as pure math over explicit cache objects.

Encoder: conv stem (two conv1d + GELU, the second with stride 2), sinusoidal positions,
pre-LN residual blocks. Decoder: token + learned positions, pre-LN blocks with causal self-
attention and cross-attention to the audio, output tied to the token embedding.

No module keeps state between calls. Every cache is a dataclass passed in and returned
(:mod:`susurrus.model.caches`):

* :class:`KV` holds one attention layer's keys and values, shape (batch, time, width).
* :class:`EncoderCache` holds the encoder's per-layer keys/values of frames already encoded,
  so a streaming encoder can append new frames that attend to the past without re-encoding
  it (see :meth:`AudioEncoder.forward_frames`).
* :class:`DecoderCache` holds the decoder's per-layer self-attention keys/values (grown one
  token at a time) and the cross-attention keys/values projected once from the audio
  features; :meth:`TextDecoder.cross_kv` computes those, and can extend them frame by frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from susurrus.model.caches import KV, DecoderCache, EncoderCache, HeadKV, PartedKV, heads_of
from susurrus.model.layers import Bf16Linear, Conv1d, Linear, int8_linear


@dataclass(frozen=True)
class ModelDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int


class LayerNorm(nn.LayerNorm):
    """Computed in float32 whatever the model's dtype (a float16/bfloat16 model's weights are
    read as float32: on a float32 model the same tensors, the same bits). ``keep_float``: the
    output stays float32 (the decoder's last norm, whose output the float32 logits read)."""

    def __init__(self, n_state: int, keep_float: bool = False):
        super().__init__(n_state)
        self.keep_float = keep_float

    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)
        return y if self.keep_float else y.type(x.dtype)


def to_host(x: Tensor) -> Tensor:
    """``x`` where the host's Python reads it: itself on the CPU (no copy), else a float32 copy
    in host memory (one transfer for a whole batch of logits or attention scores)."""
    return x if x.device.type == "cpu" else x.float().cpu()


def top_entries(row: Tensor, k: int) -> Tensor:
    """The indices of the ``k`` largest entries of a 1-D float ``row``, as ``row.topk(k)``
    gives them (largest first), ~4x faster on a vocabulary-wide row: the largest of each 16
    entries are ranked first, the k-th of those is a floor that at least ``k`` entries reach,
    and only the entries at or above it are ranked. Where two of the first ``k + 1`` tie, the
    row goes to ``topk`` itself: which of tied entries it keeps, and in which order, is its
    own rule (the order matters: a matrix-vector product's rows round differently in another
    order)."""
    n = row.shape[0]
    if n < 64 * k or row.dtype != torch.float32 or row.device.type != "cpu" or row.requires_grad:
        return row.topk(k).indices
    values = row.numpy()
    blocks = values[:n - n % 16].reshape(16, -1).max(0)
    floor = np.partition(blocks, -k)[-k]
    candidates = np.flatnonzero(values >= floor)
    if len(candidates) < k:  # (NaN, which topk ranks first)
        return row.topk(k).indices
    picked = torch.from_numpy(values[candidates]).topk(min(k + 1, len(candidates)))
    if bool((picked.values[1:] == picked.values[:-1]).any()):
        return row.topk(k).indices  # tied entries: in topk's own order
    return torch.from_numpy(candidates)[picked.indices[:k]]


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """Whisper's fixed sinusoidal encoder positions, (length, channels)."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2, dtype=torch.float32))
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = Linear(n_state, n_state)
        self.key = Linear(n_state, n_state, bias=False)
        self.value = Linear(n_state, n_state)
        self.out = Linear(n_state, n_state)
        # the dtype its keys and values are kept in and its attention runs in (None: the
        # input's); bfloat16 in a ``bf16_encoder`` (:func:`quantize_linears`)
        self.dtype: torch.dtype | None = None

    def projected(self, x: Tensor) -> Tensor:
        """``x`` as the projections read it: rounded to bfloat16 once for all three of a
        ``bf16_encoder`` block (:class:`Bf16Linear` rounds its input anyway), else as is."""
        return x.to(self.dtype) if self.dtype is not None else x

    def project_kv(self, x: Tensor) -> KV:
        # a bias-free bf16 key stays in bfloat16: the bits its float32 copy would round back to
        k = self.key.product(x) if isinstance(self.key, Bf16Linear) and self.key.bias is None else self.key(x)
        v = self.value(x)
        if self.dtype is not None:
            k, v = k.to(self.dtype), v.to(self.dtype)
        return KV(k, v)

    def attend(self, q: Tensor, kv: KV, mask: Tensor | None = None,
               need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Scaled dot-product attention; with ``need_weights`` also the (pre-softmax) scores."""
        mixed, scores = self.mix(q, kv, mask, need_weights)
        return self.out(mixed), scores

    def mix(self, q: Tensor, kv: KV, mask: Tensor | None = None,
            need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """The heads' weighted values (batch, T, width) before the output projection, and with
        ``need_weights`` the (pre-softmax) scores (batch, heads, T, time)."""
        b, t, d = q.shape
        if b > 1 and kv.k.shape[0] == 1 and mask is None:
            # several rows over one audio (beams, best-of samples): their queries as one row's,
            # so the keys/values are read once; broadcast over the batch, attention copies them
            # for every row (10 ms against 1 ms a call for 5 beams of tiny.en over 1500 frames, one thread)
            mixed, scores = self.mix(q.reshape(1, b * t, d), kv, None, need_weights)
            if scores is not None:
                scores = scores.view(scores.shape[1], b, t, -1).transpose(0, 1)
            return mixed.view(b, t, d), scores
        if isinstance(kv, PartedKV):
            return self._mix_parts(q, kv.parts(), mask, need_weights)
        h = self.n_head
        if need_weights:
            return self._mix_parts(q, [HeadKV(heads_of(kv.k, h), heads_of(kv.v, h))], mask, need_weights)
        dtype = kv.k.dtype  # the attention runs in the keys' dtype, its output in the query's
        qh = heads_of(q.to(dtype), h)
        out = F.scaled_dot_product_attention(qh, heads_of(kv.k, h), heads_of(kv.v, h),
                                             attn_mask=None if mask is None else mask.to(dtype))
        return out.transpose(1, 2).reshape(b, t, d).to(q.dtype), None

    def _mix_parts(self, q: Tensor, parts: list[HeadKV], mask: Tensor | None,
                   need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """:meth:`mix` with its scores computed (kept with ``need_weights``), over consecutive
        parts of the keys/values (one or more, head by head): one softmax over every part's
        scores, the values' weighted sums added part by part."""
        b, t, d = q.shape
        dtype = parts[0].k.dtype
        qh = heads_of(q.to(dtype), self.n_head)
        scores = torch.cat([qh @ kv.k.transpose(-1, -2) for kv in parts], dim=-1) * (d // self.n_head) ** -0.5
        if mask is not None:
            scores = scores + mask
        weights = scores.float().softmax(dim=-1).to(dtype)
        out, at = None, 0
        for kv in parts:
            n = kv.length
            part = weights[..., at:at + n] @ kv.v
            out, at = part if out is None else out + part, at + n
        assert out is not None
        return out.transpose(1, 2).reshape(b, t, d).to(q.dtype), scores.detach() if need_weights else None


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        n_mlp = n_state * 4
        self.mlp = nn.Sequential(Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x: Tensor, past: KV | None, mask: Tensor | None = None,
                cross: KV | None = None, need_cross_weights: bool = False,
                ) -> tuple[Tensor, KV, Tensor | None]:
        """One block. Returns the output, this layer's self-attention keys/values including
        the new positions, and (optionally) the cross-attention scores."""
        h = self.attn.projected(self.attn_ln(x))
        new = self.attn.project_kv(h)
        kv = new if past is None else past.append(new.k, new.v)
        y, _ = self.attn.attend(self.attn.query(h), kv, mask)
        x = x + y
        scores = None
        if self.cross_attn is not None and cross is not None:
            h = self.cross_attn_ln(x)
            y, scores = self.cross_attn.attend(self.cross_attn.query(h), cross,
                                               need_weights=need_cross_weights)
            x = x + y
        x = x + self.mlp(self.mlp_ln(x))
        return x, kv, scores


class AudioEncoder(nn.Module):
    def __init__(self, n_mels: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.conv1 = Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer))
        self.ln_post = LayerNorm(n_state)

    def stem(self, mel: Tensor) -> Tensor:
        """Conv stem: mel (batch, n_mels, 2T) -> frames (batch, T, n_state), before positions."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x))
        return x.permute(0, 2, 1)

    def forward(self, mel: Tensor) -> Tensor:
        """Full bidirectional encoding of a (batch, n_mels, 3000) window: (batch, 1500, width).
        ``mel`` may be on the host in float32: it is moved to the stem's device and dtype."""
        w = self.conv1.weight
        x = self.stem(mel.to(device=w.device, dtype=w.dtype))
        x = x + self.positional_embedding[: x.shape[1]].to(x.dtype)
        for block in self.blocks:
            x, _, _ = block(x, None)
        return self.ln_post(x)

    def forward_frames(self, frames: Tensor, cache: EncoderCache, mask: Tensor | None = None,
                       ) -> tuple[Tensor, EncoderCache]:
        """Encode new stem frames (batch, T, width) that attend to ``cache`` (earlier frames)
        and to each other under ``mask`` (T, cache.length + T). Positions continue from the
        cache. Returns the new frames' outputs and the cache extended by them."""
        start = cache.length
        x = frames + self.positional_embedding[start:start + frames.shape[1]].to(frames.dtype)
        layers: list[KV | None] = []
        for block, past in zip(self.blocks, cache.layers):
            x, kv, _ = block(x, past, mask)
            layers.append(kv)
        return self.ln_post(x), EncoderCache(layers)


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state))
        self.blocks = nn.ModuleList(
            ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer))
        self.ln = LayerNorm(n_state, keep_float=True)  # final hidden states in float32, whatever the dtype
        # (width, vocab) copy of the tied output weight, set by ``freeze``: a row-vector times a
        # contiguous (width, vocab) matrix runs ~2.5x faster on CPU than against its transpose.
        # float32 in every model (a half model keeps it so: ``keep_float_output``)
        self.register_buffer("output_t", None, persistent=False)

    def freeze(self) -> None:
        """Call after loading weights for inference: caches the transposed output weight."""
        self.output_t = self.token_embedding.weight.detach().T.contiguous()
        self.output_int8 = None
        self.shortlist_int8 = None
        self.shortlist_fence = None

    def quantize_output(self) -> None:
        """Project to the vocabulary with int8 weights for every decode (lossy: logits move by
        up to ~1.3, so near-ties can flip; WER cost measured in docs/benchmarks.md). Streaming
        does not need this: :meth:`project_shortlist` is as fast and exact."""
        self.output_int8 = int8_linear(self.token_embedding.weight)

    def keep_float_output(self, output_t: Tensor) -> None:
        """After the model is cast to a half dtype: the output matrix back in float32
        (``output_t``: :meth:`freeze`'s, before the cast), so that the logits are a float32
        product of float32 hidden states (``ln`` keeps them float32) and the checkpoint's own
        output weights, as on a float32 model, not a half product cast to float32."""
        self.output_t = output_t.to(device=self.token_embedding.weight.device, dtype=torch.float32)

    def project(self, x: Tensor) -> Tensor:
        """Vocabulary logits (…, vocab), float32, of final hidden states ``x`` (…, width): a
        float32 product in every dtype (:meth:`keep_float_output`)."""
        if getattr(self, "output_int8", None) is not None and x.dtype == torch.float32:
            return self.output_int8(x)
        weight_t = self.output_t if self.output_t is not None else self.token_embedding.weight.T
        return (x @ weight_t.to(x.dtype)).float()

    def project_approx(self, x: Tensor) -> Tensor:
        """Approximate logits (positions, vocab) of ``x`` (positions, width) with int8 weights
        and activations (~4x faster than :meth:`project` for one position on CPU). Only for
        picking a shortlist to rescore. Each position is quantised on a scale of its own: it is
        divided by its largest magnitude, and a fence row (+1, -1) fixes the pass's quantisation
        range at [-1, 1] whatever the other rows hold, so a position's logits are the same
        alone or packed with many streams' (one pass reads the 20-50 MB of weights once)."""
        if x.device.type != "cpu":  # int8 products are a CPU's: on a GPU every logit exactly
            return self.project(x)
        if getattr(self, "shortlist_int8", None) is None:
            self.shortlist_int8 = int8_linear(self.token_embedding.weight)
            self.shortlist_fence = torch.zeros(1, self.token_embedding.weight.shape[1])
            self.shortlist_fence[0, :2] = torch.tensor([1.0, -1.0])
        x = x.float()
        peak = x.abs().amax(-1, keepdim=True).clamp_min(1e-12)
        return self.shortlist_int8(torch.cat([x / peak, self.shortlist_fence]))[:-1] * peak

    def rescore(self, x: Tensor, approx: Tensor, k: int = 32) -> Tensor:
        """Exact logits for the ``k`` best entries of ``approx`` (one position: ``x`` (width,),
        ``approx`` (vocab,), masked entries at -inf stay masked); every other entry is capped
        below the exact ones, so the argmax is exact whenever the true best token is among the
        int8 top ``k`` (its error is ~1 logit; a test checks the argmax on real decoding)."""
        if x.device.type != "cpu":  # (a GPU's ``approx`` is exact already: project_approx)
            return approx
        top = top_entries(approx, k)
        top = top[torch.isfinite(approx[top])]
        exact = self.token_embedding.weight[top].to(x.dtype) @ x
        out = approx.clone()
        if len(top):
            out.clamp_(max=float(exact.min()))
            out[top] = exact.float()
        return out

    def cross_kv(self, audio_features: Tensor) -> list[KV]:
        """Project audio features (batch, frames, width) to every layer's cross keys/values."""
        return [block.cross_attn.project_kv(audio_features) for block in self.blocks]

    def new_cache(self, audio_features: Tensor) -> DecoderCache:
        return DecoderCache(self.cross_kv(audio_features), [None] * len(self.blocks))

    def forward(self, tokens: Tensor, cache: DecoderCache, alignment_heads: Tensor | None = None,
                last_only: bool = False, project: bool = True) -> tuple[Tensor, DecoderCache, Tensor | None]:
        """Decode ``tokens`` (batch, T) after ``cache.offset`` cached tokens.

        Returns logits (batch, T, vocab), the extended cache and, when ``alignment_heads``
        (a bool (n_layer, n_head) mask) is given, the cross-attention scores of those heads
        stacked as (batch, heads, T, frames). ``last_only`` projects only the last position to
        the vocabulary (logits (batch, 1, vocab)). With ``project=False`` the first result is
        the final hidden states (batch, T, width) instead of logits (see :meth:`project`,
        :meth:`project_approx`): a forced prefix needs no logits at all.
        """
        offset = cache.offset
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[offset:offset + t]
        x = x.to(cache.cross[0].k.dtype)
        mask = None
        if t > 1:
            mask = torch.full((t, offset + t), float("-inf"), dtype=x.dtype, device=x.device).triu_(offset + 1)
        self_kv: list[KV | None] = []
        picked: list[Tensor] = []
        for i, (block, past, cross) in enumerate(zip(self.blocks, cache.self_kv, cache.cross)):
            heads = None if alignment_heads is None else alignment_heads[i]
            need = heads is not None and bool(heads.any())
            x, kv, scores = block(x, past, mask, cross, need_cross_weights=need)
            self_kv.append(kv)
            if need:
                picked.append(scores[:, heads])
        x = self.ln(x[:, -1:] if last_only else x)
        qk = torch.cat(picked, dim=1) if picked else None
        return (self.project(x) if project else x), DecoderCache(cache.cross, self_kv), qk


INT8_PARTS = ("encoder", "decoder")


def quantize_linears(net: Whisper, parts: tuple[str, ...] = INT8_PARTS, kind: str = "int8") -> int:
    """Replace the linear layers (attention projections and MLPs) of the ``parts``' residual
    blocks, in place, by int8 dynamically quantised ones (``kind="int8"``) or by
    :class:`Bf16Linear` (``"bf16"``, which also keeps the blocks' attention keys/values in
    bfloat16 and runs their attention in it: ``MultiHeadAttention.dtype``); the conv stem, layer
    norms, embeddings and the vocabulary projection stay float32 (and, with int8, attention).
    Lossy (docs/benchmarks.md). Returns the number of linear layers replaced."""
    unknown = set(parts) - set(INT8_PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {sorted(unknown)}; known: {list(INT8_PARTS)}")
    if kind not in ("int8", "bf16"):
        raise ValueError(f"kind must be 'int8' or 'bf16', not {kind!r}")
    replaced = 0
    for part in parts:
        blocks = getattr(net, part).blocks
        for module in list(blocks.modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, Linear) and not isinstance(child, Bf16Linear):
                    setattr(module, child_name, int8_linear(child.weight, child.bias) if kind == "int8"
                            else Bf16Linear.of(child))
                    replaced += 1
            if kind == "bf16" and isinstance(module, MultiHeadAttention):
                module.dtype = torch.bfloat16
    return replaced


class Whisper(nn.Module):
    def __init__(self, dims: ModelDims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims.n_mels, dims.n_audio_ctx, dims.n_audio_state,
                                    dims.n_audio_head, dims.n_audio_layer)
        self.decoder = TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state,
                                   dims.n_text_head, dims.n_text_layer)
        heads = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool, device="cpu")
        heads[dims.n_text_layer // 2:] = True  # the reference's default: upper half of layers
        # a host tensor whatever the model's device: which heads to pick is Python's decision,
        # made without waiting on the device (indexing a device tensor with it is allowed)
        self.alignment_heads = heads

    @property
    def device(self) -> torch.device:
        """Where the weights are (and every cache a stream makes)."""
        return self.decoder.token_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The model's floating dtype (its embeddings'; a ``bf16_encoder`` CPU model says float32)."""
        return self.decoder.token_embedding.weight.dtype

    def set_alignment_heads(self, pairs: list[tuple[int, int]] | list[list[int]]) -> None:
        heads = torch.zeros(self.dims.n_text_layer, self.dims.n_text_head, dtype=torch.bool)
        for layer, head in pairs:
            heads[int(layer), int(head)] = True
        self.alignment_heads = heads

    @property
    def is_multilingual(self) -> bool:
        return self.dims.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        return self.dims.n_vocab - 51765 - int(self.is_multilingual)

    def embed_audio(self, mel: Tensor) -> Tensor:
        return self.encoder(mel)

    def logits(self, tokens: Tensor, audio_features: Tensor) -> Tensor:
        """Teacher-forced logits of ``tokens`` over ``audio_features`` (no cache kept)."""
        out, _, _ = self.decoder(tokens, self.decoder.new_cache(audio_features))
        return out
