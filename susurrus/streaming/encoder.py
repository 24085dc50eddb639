"""Incremental block-causal encoder over a running key/value cache.

Audio frames are encoded once. At each step the frames that became available are encoded
together (they attend to each other and to the cached keys/values of all earlier frames);
the last ``lookahead`` of them stay *provisional*: their outputs are used, but their keys and
values are not cached, and they are recomputed at the next step with more future in view.
The conv stem is computed for the new frames only, from a 2-frame mel margin, so the frames
equal those of the full stem (up to the conv's rounding); the provisional frames' stems are kept
from the step before (``EncoderState.stems``). With unlimited look-ahead the result is the full
encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from susurrus.audio.features import DYNAMIC_RANGE
from susurrus.model.caches import KV, EncoderCache
from susurrus.model.whisper import Whisper
from susurrus.streaming import silence_cache
from susurrus.streaming.calls import EncodeFrames, Steps, drive
from susurrus.streaming.config import SILENCE_LEVEL


@dataclass
class EncoderState:
    """Finalised frames' per-layer keys/values; outputs of the frames the last step finalised
    and of the provisional frames. (The outputs of frames finalised earlier are in the decoder's
    cross-attention buffer already: they are not kept here.)"""

    cache: EncoderCache
    finalized: int  # frames whose keys/values are cached: no longer recomputed
    new_final: torch.Tensor  # (1, n, width): outputs of the frames the last step finalised
    provisional_out: torch.Tensor  # (1, k, width): outputs of frames recomputed next step
    # (1, p, width): the first frames of the silence after the audio, encoded as its
    # continuation (they attend to the audio; the audio's frames do not attend to them)
    silence_out: torch.Tensor | None = None
    # (1, k, width): the provisional frames' conv stem outputs, normalised with ``stems_max``:
    # a frame's stem is final once its mel is, so the next step computes only the new frames'
    stems: torch.Tensor | None = None
    stems_max: float | None = None

    @classmethod
    def empty(cls, net: Whisper) -> EncoderState:
        width = net.dims.n_audio_state
        empty = torch.zeros(1, 0, width, device=net.device, dtype=net.dtype)
        return cls(EncoderCache.empty(net.dims.n_audio_layer), 0, empty, empty)

    @property
    def frames(self) -> int:
        return self.finalized + self.provisional_out.shape[1]

    def outputs(self) -> torch.Tensor:
        """The outputs of the frames the last step finalised and of the provisional ones:
        frames ``[finalized - new_final.shape[1], frames)``."""
        return torch.cat([self.new_final, self.provisional_out], dim=1)


# silence frames whose stem is computed: frame j reads mel 2j-2 .. 2j+2, so the first two after
# the audio read its last mel frames and the third reads the floor alone, as every one after it
SILENCE_EDGE = 3


def normalize_frames(log_mel: torch.Tensor, running_max: float) -> torch.Tensor:
    """Whisper's clamp and scaling, with a running (causal) maximum."""
    return (torch.clamp(log_mel, min=running_max - DYNAMIC_RANGE) + 4.0) / 4.0


def ready_frames(n_mel: int, final: bool) -> int:
    """Encoder frames computable from ``n_mel`` mel frames: frame j needs mel 2j-2 .. 2j+2;
    at the end of the stream the stem's zero padding supplies the missing right context."""
    if final:
        return (n_mel + 1) // 2
    return max(0, (n_mel - 1) // 2)


def stem_frames(net: Whisper, mel: torch.Tensor, j0: int, j1: int,
                running_max: float | None = None) -> torch.Tensor:
    """Stem outputs (1, j1 - j0, width) of encoder frames [j0, j1) from mel (n_mels, M),
    equal to the full stem's: conv1 outputs 2 j0 - 1 .. 2 j1 - 1 are computed from mel
    2 j0 - 2 .. 2 j1, with zeros where the full stem pads. ``mel`` is normalised already, or
    log10 power normalised here (only the frames read) with ``running_max``. The mel stays on
    the host (the front end is cheap there); the frames read travel to the model's device."""
    enc = net.encoder
    n = mel.shape[1]
    lo, hi = 2 * j0 - 1, 2 * j1 - 1  # conv1 outputs needed (inclusive)
    first, last = max(lo, 0), min(hi, n - 1)  # those that exist; conv2 pads the rest with 0
    m_lo, m_hi = first - 1, last + 2  # mel frames needed [m_lo, m_hi); conv1 pads with 0
    piece = mel[:, max(m_lo, 0): min(m_hi, n)]
    if running_max is not None:
        piece = normalize_frames(piece, running_max)
    piece = F.pad(piece, (max(0, -m_lo), max(0, m_hi - n)))[None]
    piece = piece.to(device=enc.conv1.weight.device, dtype=enc.conv1.weight.dtype)  # (no-op on a float32 CPU model)
    c1 = F.gelu(F.conv1d(piece, enc.conv1.weight, enc.conv1.bias))
    c1 = F.pad(c1, (first - lo, hi - last))
    c2 = F.gelu(F.conv1d(c1, enc.conv2.weight, enc.conv2.bias, stride=2))
    return c2.permute(0, 2, 1)


@torch.inference_mode()
def encode_window(net: Whisper, mel: torch.Tensor, running_max: float | None = None) -> torch.Tensor:
    """The window as offline Whisper encodes it: its frames padded with digital silence (the
    log-mel floor) to 30 s, every frame attending to every other. Returns the encoder output
    (1, n_audio_ctx, width). ``mel`` as in :func:`encode_step`."""
    size = 2 * net.dims.n_audio_ctx
    piece = mel[:, :size]
    if running_max is not None:
        piece = normalize_frames(piece, running_max)
    floor = float(piece.max()) - DYNAMIC_RANGE / 4 if running_max is None else (running_max - DYNAMIC_RANGE + 4.0) / 4.0
    pad = torch.full((piece.shape[0], size - piece.shape[1]), floor)
    return net.encoder(torch.cat([piece, pad], dim=1)[None])


def silence_keys(net: Whisper) -> list[KV]:
    """Every encoder layer's self-attention keys/values over a 30 s window of digital silence
    (normalised log-mel :data:`SILENCE_LEVEL`). A constant of the weights (:func:`silence_encoding`)."""
    return silence_encoding(net)[0]


def silence_encoding(net: Whisper, level: float = SILENCE_LEVEL) -> tuple[list[KV], torch.Tensor]:
    """A 30 s window of a constant normalised log-mel ``level`` (digital silence:
    :data:`SILENCE_LEVEL`) through the encoder: every layer's self-attention keys/values and the
    output (1, n_audio_ctx, width), which is ``net.encoder(mel)`` exactly. One pass gives both (a
    full window's encode, ~0.4 s with tiny on one core). Digital silence's is a constant of the
    weights, made on first use and kept on the encoder (as the decoder keeps its transposed
    output weight), and on a CPU kept on disk for the next process (:mod:`silence_cache`);
    another level (diagnostics) is computed each time."""
    enc = net.encoder
    kept = level == SILENCE_LEVEL
    made = getattr(enc, "silence_encoding", None) if kept else None
    if made is not None:
        return made
    key = silence_cache.digest(enc, level) if kept and net.device.type == "cpu" else None
    on_disk = silence_cache.load(key) if key else None
    if on_disk is not None:
        made = ([KV(k, v) for k, v in zip(on_disk["k"], on_disk["v"])], on_disk["out"])
    else:
        mel = torch.full((1, net.dims.n_mels, 2 * net.dims.n_audio_ctx), level)
        x = enc.stem(mel.to(device=net.device, dtype=enc.conv1.weight.dtype))
        x = x + enc.positional_embedding[: x.shape[1]].to(x.dtype)
        keys = []
        with torch.inference_mode():
            for block in enc.blocks:
                x, kv, _ = block(x, None)
                keys.append(kv)
            made = (keys, enc.ln_post(x))
        if key:
            silence_cache.save(key, {"k": [kv.k.clone() for kv in keys], "v": [kv.v.clone() for kv in keys],
                                     "out": made[1].clone()})
    if kept:
        enc.silence_encoding = made
    return made


@torch.inference_mode()
def encode_padded(net: Whisper, mel: torch.Tensor, running_max: float) -> torch.Tensor:
    """The window's frames as offline Whisper encodes them in a window padded with silence to
    30 s, every frame attending to every other and to the padding, at a seventh of the cost
    (tiny.en, 2 s of audio): the padding's keys and values are those of a window of silence
    (:func:`silence_keys`) instead of being computed with the audio in view. What a word at an
    utterance's start is heard with: tiny.en reads JFK's "Ask not" as "S not" with its frames
    attending to the audio only, and "Ask not" either way with the padding.
    Returns (1, frames, width), the audio's frames only; ``mel`` as in :func:`encode_step`."""
    enc = net.encoder
    size = 2 * net.dims.n_audio_ctx
    piece = normalize_frames(mel[:, :size], running_max)
    n = (piece.shape[1] + 1) // 2
    floor = (running_max - DYNAMIC_RANGE + 4.0) / 4.0
    tail = torch.full((piece.shape[0], 2 * n + 4 - piece.shape[1]), floor)  # the stem's last frames read silence
    x = enc.stem(torch.cat([piece, tail], dim=1)[None].to(device=net.device, dtype=enc.conv1.weight.dtype))[:, :n]
    x = x + enc.positional_embedding[:n].to(x.dtype)
    for block, pad in zip(enc.blocks, silence_keys(net)):
        x, _, _ = block(x, KV(pad.k[:, n:], pad.v[:, n:]))
    return enc.ln_post(x)


def encode_step(net: Whisper, state: EncoderState, mel: torch.Tensor, lookahead: int | None,
                final: bool = False, running_max: float | None = None, silence: int = 0) -> EncoderState:
    """:func:`encode_steps` run alone."""
    return drive(net, encode_steps(net, state, mel, lookahead, final, running_max, silence))


@torch.inference_mode()
def encode_steps(net: Whisper, state: EncoderState, mel: torch.Tensor, lookahead: int | None,
                 final: bool = False, running_max: float | None = None, silence: int = 0) -> Steps[EncoderState]:
    """Encode the frames of ``mel`` (n_mels, M) not yet final (``mel`` normalised, or log10
    power with ``running_max`` to normalise the frames read).

    ``lookahead`` is the number of trailing frames kept provisional (``None``: all of them
    until ``final``). ``silence``: also encode this many frames of digital silence after the
    audio (Whisper's padding, the log-mel floor) in the same pass, attending to the audio
    (``silence_out``), as offline Whisper's padding frames attend to the speech before them;
    the audio's frames do not attend to them, so its outputs do not change. Returns the new
    state; nothing in ``state`` is modified. A generator of one model call (:mod:`calls`): the
    encoder blocks' pass."""
    available = min(ready_frames(mel.shape[1], final), net.dims.n_audio_ctx)
    start = state.finalized
    if available <= start:  # nothing new: nothing finalised by this step
        return replace(state, new_final=state.new_final[:, :0])
    # the provisional frames' stems from the last step (their mel has not changed; the running
    # maximum they were normalised with must not have either), then the new frames'
    cached = 0
    if state.stems is not None and running_max is not None and state.stems_max == running_max:
        cached = min(state.stems.shape[1], available - start)
    stems = stem_frames(net, mel, start + cached, available, running_max)
    if cached:
        stems = torch.cat([state.stems[:, :cached], stems], dim=1)
    frames = stems  # (and the silence continuation's, below)
    silence = max(0, min(silence, net.dims.n_audio_ctx - available))
    mask = None
    if silence:
        # the floor: log10 power max - 8 (normalised here), or max - 2 once normalised
        floor = running_max - DYNAMIC_RANGE if running_max is not None else float(mel.max()) - DYNAMIC_RANGE / 4
        m_end = min(mel.shape[1], 2 * available + 2)  # mel frames the pad's first frames read
        # a silence frame from the third on reads the floor alone: its stem is the third's
        edge = min(silence, SILENCE_EDGE)
        ext = torch.cat([mel[:, :m_end], torch.full((mel.shape[0], 2 * edge + 2), floor)], dim=1)
        pad = stem_frames(net, ext, available, available + edge, running_max)
        if silence > edge:
            pad = torch.cat([pad, pad[:, -1:].expand(-1, silence - edge, -1)], dim=1)
        frames = torch.cat([frames, pad], dim=1)
        n_new = available - start
        mask = torch.zeros(n_new + silence, state.cache.length + n_new + silence, device=frames.device)
        mask[:n_new, state.cache.length + n_new:] = -float("inf")
    out, cache = yield EncodeFrames(frames, state.cache, mask)
    silence_out = out[:, available - start:] if silence else None
    out = out[:, :available - start]
    if final:
        keep = available - start
    elif lookahead is None:
        keep = 0
    else:
        keep = max(0, available - start - lookahead)
    total = start + keep  # frames whose keys/values are cached from now on
    # the provisional frames' keys/values are dead: the next step's frames are written in their place
    layers: list[KV | None] = [None if kv is None or total == 0 else kv.keep(total) for kv in cache.layers]
    return EncoderState(EncoderCache(layers), total, out[:, :keep], out[:, keep:], silence_out,
                        stems[:, keep:], running_max)
