"""Incremental log-mel front end.

Audio arrives in pieces of any size, and the frames are the same bit for bit however it is cut
(the mel projection sums in an order that does not depend on how many frames a call computes).
A mel frame ``i`` covers samples ``[160 i - 200, 160 i + 200)`` (Whisper's centred STFT), so it
is computed once those samples have arrived; at the stream start the signal is reflect-padded as
the offline front end does. Frames are kept as log10 mel power; normalisation uses a running
maximum (causal), applied when frames are handed to the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from susurrus.audio.features import HOP_LENGTH, N_FFT, mel_power

HALF = N_FFT // 2  # 200 samples of context each side of a frame centre


@dataclass
class MelState:
    """What the front end keeps between calls: a short tail of samples and counters."""

    n_mels: int = 80
    samples_seen: int = 0  # samples received in total
    frames_done: int = 0  # mel frames computed in total
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    tail_start: int = 0  # absolute index of tail[0]
    running_max: float = -np.inf


def push_audio(state: MelState, samples: np.ndarray, final: bool = False) -> torch.Tensor:
    """Feed 16 kHz samples; return the new log10 mel frames (n_mels, k), updating ``state``.

    With ``final`` the stream is over: the remaining frames are computed as the offline front
    end would at the end of the file (one hop of zeros appended, reflect padding after it),
    up to ``samples_seen // 160`` frames in total."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    state.tail = np.concatenate([state.tail, samples])
    state.samples_seen += len(samples)
    if final:
        total = state.samples_seen // HOP_LENGTH
    else:
        # frame i needs samples up to 160 i + 200 (exclusive)
        total = max(0, (state.samples_seen - HALF) // HOP_LENGTH + 1) if state.samples_seen > HALF else 0
    first = state.frames_done
    if total <= first:
        return torch.zeros(state.n_mels, 0)
    # samples needed: [160 first - 200, 160 (total - 1) + 200)
    lo = HOP_LENGTH * first - HALF
    hi = HOP_LENGTH * (total - 1) + HALF
    if final:
        padded = np.concatenate([state.tail, np.zeros(HOP_LENGTH, dtype=np.float32)])
        end_abs = state.tail_start + len(padded)
        if hi > end_abs:  # reflect past the end, as a centred STFT does
            need = hi - end_abs
            padded = np.concatenate([padded, padded[-2:-2 - need:-1]])
        buf = padded
    else:
        buf = state.tail
    if lo < 0:  # stream start: reflect-pad on the left
        head = buf[1:1 - lo][::-1]
        piece = np.concatenate([head, buf[: hi - state.tail_start]])
    else:
        piece = buf[lo - state.tail_start: hi - state.tail_start]
    frames = mel_power(piece, state.n_mels, center=False, pad_end=0, batch_invariant=True)[:, : total - first]
    state.frames_done = total
    keep_from = HOP_LENGTH * total - HALF  # the next frame's first sample
    if keep_from > state.tail_start:
        state.tail = state.tail[keep_from - state.tail_start:]
        state.tail_start = keep_from
    if frames.numel():
        state.running_max = max(state.running_max, float(frames.max()))
    return frames


def stream_samples(pcm: np.ndarray) -> np.ndarray:
    """A stream's input checked and as float32: 1-D, float32 in [-1, 1] or int16, finite."""
    pcm = np.asarray(pcm)
    if pcm.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {pcm.shape}")
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / 32768.0
    if not np.issubdtype(pcm.dtype, np.floating):
        raise TypeError(f"expected float32 or int16 samples, got {pcm.dtype}")
    if pcm.size and not np.isfinite(pcm).all():
        raise ValueError("audio contains NaN or infinite samples")
    return pcm.astype(np.float32, copy=False)
