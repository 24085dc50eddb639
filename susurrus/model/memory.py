"""What a model and one stream hold on the device, from the checkpoint's dims and the dtype
alone, and how many streams fit a card (docs/architecture.md, "Memory per stream").

A stream's device memory is its caches (:mod:`susurrus.model.caches`), at their peak a full
30 s window:

* the encoder's keys and values of every finalised frame, per encoder layer, in a
  :class:`~susurrus.model.caches.KVStore` that grows by a quarter: at most
  ``n_audio_ctx + n_audio_ctx // 4`` positions of ``n_audio_state`` keys and values;
* its cross-attention buffer (``CrossBuffer.own``): per decoder layer, keys and values of all
  ``n_audio_ctx`` positions of ``n_text_state``, allocated whole when the stream opens (the
  silence behind the real frames is the model's, shared by every stream);
* the decoder's self-attention keys/values: the forced prefix's and the step's path, at most
  ``n_text_ctx`` tokens each, per decoder layer, grown by a quarter too;
* a step's transient activations, held only while a round runs (counted once per stream, a
  bound: the encoder's new frames through one block, the attention scores in float32).

The mel features, the audio and the step's decisions stay on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from susurrus.model.whisper import ModelDims

STEP_FRAMES = 160  # encoder frames one step may run at its peak (a 3.2 s first step of a stream; ~107 after)
STEP_TOKENS = 64  # decoder positions one call may run (prefix + verified hypothesis)


def _grown(n: int) -> int:
    """A :class:`KVStore`'s largest capacity for ``n`` positions (a quarter more, and the step's room)."""
    return n + n // 4


@dataclass(frozen=True)
class StreamBytes:
    """One stream's device bytes at its peak, part by part."""

    encoder_kv: int
    cross_kv: int
    decoder_kv: int
    transient: int

    @property
    def total(self) -> int:
        return self.encoder_kv + self.cross_kv + self.decoder_kv + self.transient


def stream_bytes(dims: ModelDims, dtype: torch.dtype = torch.float32, frames: int | None = None,
                 tokens: int | None = None) -> StreamBytes:
    """A stream's caches on the device with ``frames`` encoder frames finalised (default: the
    whole window) and ``tokens`` decoder tokens (default: the decoder's context), in ``dtype``
    (the caches' element size), at their largest capacity; see the module's docstring."""
    b = torch.empty(0, dtype=dtype).element_size()
    frames = dims.n_audio_ctx if frames is None else frames
    tokens = dims.n_text_ctx if tokens is None else tokens
    encoder = dims.n_audio_layer * 2 * _grown(frames) * dims.n_audio_state * b
    cross = dims.n_text_layer * 2 * dims.n_audio_ctx * dims.n_text_state * b
    decoder = 2 * dims.n_text_layer * 2 * _grown(tokens) * dims.n_text_state * b  # the prefix's and the path's
    transient = (STEP_FRAMES * 4 * dims.n_audio_state * b  # one block's widest activation (the MLP)
                 + dims.n_audio_head * STEP_FRAMES * (dims.n_audio_ctx + STEP_FRAMES) * 4  # encoder scores, float32
                 + dims.n_text_head * STEP_TOKENS * dims.n_audio_ctx * 4  # decoder cross scores, float32
                 + STEP_TOKENS * dims.n_vocab * 4)  # logits, float32
    return StreamBytes(encoder, cross, decoder, transient)


def model_bytes(dims: ModelDims, dtype: torch.dtype = torch.float32) -> int:
    """The model's device bytes: its weights, the transposed output copy (``TextDecoder.freeze``,
    float32 whatever the dtype)
    and the silence's cross keys/values every stream shares."""
    b = torch.empty(0, dtype=dtype).element_size()
    a, t = dims.n_audio_state, dims.n_text_state
    block = lambda w: 12 * w * w + 12 * w  # noqa: E731  attention (4 w^2 + 3 w) + MLP (8 w^2 + 5 w) + 2 norms (4 w)
    encoder = dims.n_mels * a * 3 + a + a * a * 3 + a + dims.n_audio_ctx * a + dims.n_audio_layer * block(a) + 2 * a
    decoder = (dims.n_vocab * t + dims.n_text_ctx * t + dims.n_text_layer * (block(t) + 4 * t * t + 5 * t)
               + 2 * t)
    silence = dims.n_text_layer * 2 * dims.n_audio_ctx * t
    output_t = dims.n_vocab * t * 4  # the transposed output copy: float32 in every dtype (float32 logits)
    return (encoder + decoder + silence) * b + output_t


def fitting_streams(dims: ModelDims, dtype: torch.dtype, free_bytes: int, margin: float = 0.15,
                    model_loaded: bool = False) -> int:
    """How many streams fit in ``free_bytes`` of device memory: what is left after the model
    (unless ``model_loaded``: already out of ``free_bytes``) and a ``margin`` (the allocator's
    fragmentation, the framework's workspace), over a stream's peak; at least 1."""
    left = free_bytes * (1 - margin) - (0 if model_loaded else model_bytes(dims, dtype))
    return max(1, int(left // stream_bytes(dims, dtype).total))


def cuda_max_sessions(dims: ModelDims, dtype: torch.dtype, device: str | torch.device = "cuda") -> tuple[int, str]:
    """``--max-sessions`` for a server on a CUDA ``device`` (before its worker loads the model):
    the card's free memory (``torch.cuda.mem_get_info``) through :func:`fitting_streams`; and a
    line saying how it was reached."""
    free, total = torch.cuda.mem_get_info(torch.device(device))
    n = fitting_streams(dims, dtype, free)
    per = stream_bytes(dims, dtype).total
    return n, (f"{n} sessions: {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB, the model "
               f"{model_bytes(dims, dtype) / 2**20:.0f} MiB, a stream at its peak {per / 2**20:.1f} MiB, "
               "15 % kept free")


def held_bytes(session) -> int:
    """The device bytes a :class:`~susurrus.streaming.session.StreamSession`'s state holds now
    (each storage counted once, the model's shared silence not): the measurement
    :func:`stream_bytes` is checked against."""
    seen: set[int] = set()
    total = 0

    def add(t: torch.Tensor | None) -> None:
        nonlocal total
        if t is None:
            return
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            return
        seen.add(storage.data_ptr())
        total += storage.nbytes()

    state = session.state
    enc = state.window.encoder
    if enc is not None:
        for kv in enc.cache.layers:
            if kv is not None:
                add(kv.k)
                add(kv.v)
    for kv in state.cross.own:
        add(kv.k)
        add(kv.v)
    prefix = state.window.prefix
    if prefix is not None:
        for kv in prefix.self_kv:
            if kv is not None:
                add(kv.k)
                add(kv.v)
    return total
