"""Log-mel front end, numerically equal to Whisper's reference.

The spectrogram is split in two stages so the streaming engine can compute it
incrementally: :func:`mel_power` turns samples into log10 mel power frames (each frame
depends only on a 400-sample window around it), and :func:`normalize` applies Whisper's
dynamic-range clamp and scaling, which needs a maximum: the whole file's offline, a running
maximum when streaming.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # samples in a 30 s window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100 mel frames per second
TOKENS_PER_SECOND = FRAMES_PER_SECOND // 2  # 50 encoder frames per second (conv stride 2)
DYNAMIC_RANGE = 8.0  # log10 units below the maximum kept by the clamp


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    log_region = freq >= min_log_hz
    mels[log_region] = min_log_mel + np.log(freq[log_region] / min_log_hz) / logstep
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    freqs = mels * f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    log_region = mels >= min_log_mel
    freqs[log_region] = min_log_hz * np.exp(logstep * (mels[log_region] - min_log_mel))
    return freqs


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> torch.Tensor:
    """Slaney-normalised triangular mel filterbank, shape (n_mels, N_FFT // 2 + 1)."""
    fft_freqs = np.fft.rfftfreq(N_FFT, d=1.0 / SAMPLE_RATE)
    max_mel = _hz_to_mel(np.array([SAMPLE_RATE / 2.0]))[0]
    edges = _mel_to_hz(np.linspace(0.0, max_mel, n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


@functools.lru_cache(maxsize=4)
def _mel_bands(n_mels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each filter's band: the indices of its first ``w`` FFT bins from its lowest nonzero one
    (``w`` the widest band rounded up to a power of two) and its weights there (0 past the band),
    shapes (n_mels, w)."""
    weights = mel_filters(n_mels)
    nonzero = weights > 0
    lo = nonzero.float().argmax(1)
    hi = weights.shape[1] - nonzero.flip(1).float().argmax(1)
    width = 1 << max(0, int((hi - lo).max()) - 1).bit_length()
    offsets = torch.arange(width)
    index = (lo[:, None] + offsets).clamp(max=weights.shape[1] - 1)
    band = torch.where(offsets < (hi - lo)[:, None], weights.gather(1, index), 0.0)
    return index, band


def _project_invariant(power: torch.Tensor, n_mels: int) -> torch.Tensor:
    """``mel_filters(n_mels) @ power`` computed so that each frame's result does not depend on
    how many frames are projected together (a BLAS product sums in an order that depends on
    the matrix shapes, so a frame's bits depend on the batch): every output is the same
    products summed pairwise in the same order, elementwise operations only."""
    index, band = _mel_bands(n_mels)
    x = band[:, :, None] * power[index]  # (n_mels, w, frames)
    while x.shape[1] > 1:
        half = x.shape[1] // 2
        x = x[:, :half] + x[:, half:]
    return x[:, 0]


@functools.lru_cache(maxsize=1)
def _window() -> torch.Tensor:
    return torch.hann_window(N_FFT)


def mel_power(audio: np.ndarray | torch.Tensor, n_mels: int = 80, *, center: bool = True,
              pad_end: int = HOP_LENGTH, batch_invariant: bool = False) -> torch.Tensor:
    """log10 mel power of 16 kHz samples, shape (n_mels, frames), before normalisation.

    With ``center`` the signal is reflect-padded by N_FFT // 2 on both sides as Whisper does;
    ``pad_end`` zeros are appended first (Whisper's tools add one hop) and the last STFT frame
    is dropped, so ``len(audio) / HOP_LENGTH`` frames come out. Without ``center`` every
    full 400-sample window gives a frame (the streaming front end pads by itself).
    ``batch_invariant``: each frame's bits do not depend on how many frames are computed in
    the call (the streaming front end: the same audio cut into other pieces gives the same
    frames); the values differ from the matrix product's by float rounding only.
    """
    x = torch.as_tensor(np.asarray(audio, dtype=np.float32))
    if x.ndim != 1:
        raise ValueError(f"expected 1-D mono audio, got shape {tuple(x.shape)}")
    if pad_end:
        x = torch.nn.functional.pad(x, (0, pad_end))
    if x.numel() < N_FFT // 2 + 1 and center:
        x = torch.nn.functional.pad(x, (0, N_FFT // 2 + 1 - x.numel()))
    spec = torch.stft(x, N_FFT, HOP_LENGTH, window=_window(), center=center,
                      pad_mode="reflect", return_complex=True)
    if center:
        spec = spec[..., :-1]
    power = spec.abs() ** 2
    mel = _project_invariant(power, n_mels) if batch_invariant else mel_filters(n_mels) @ power
    return torch.clamp(mel, min=1e-10).log10()


def normalize(log_mel: torch.Tensor, maximum: float | torch.Tensor | None = None) -> torch.Tensor:
    """Whisper's clamp to ``maximum - 8`` and scaling to roughly [-1, 1]."""
    top = log_mel.max() if maximum is None else torch.as_tensor(maximum)
    return (torch.maximum(log_mel, top - DYNAMIC_RANGE) + 4.0) / 4.0


def log_mel_spectrogram(audio: np.ndarray | torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """The whole file's normalised log-mel spectrogram, shape (n_mels, len(audio) // 160)."""
    return normalize(mel_power(audio, n_mels))


def pad_or_trim(mel: torch.Tensor, length: int = N_FRAMES) -> torch.Tensor:
    """Cut or zero-pad the frame axis to ``length`` frames (Whisper's 30 s window)."""
    frames = mel.shape[-1]
    if frames > length:
        return mel[..., :length]
    if frames < length:
        return torch.nn.functional.pad(mel, (0, length - frames))
    return mel
