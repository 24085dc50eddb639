"""Audio loading: decode files, bytes or arrays to mono float32 at a target sample rate."""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf
import torch

SAMPLE_RATE = 16000

# Resampler design: Kaiser-windowed sinc, cutoff a little under the lower Nyquist frequency.
_ZERO_CROSSINGS = 16
_ROLLOFF = 0.945
_KAISER_BETA = 8.6
_GEMM_COLUMNS = 64  # outputs computed per row of each matrix product
_CHUNK_ELEMENTS = 1 << 22  # input-view elements per matrix product

AudioSource = str | os.PathLike | BinaryIO | bytes | bytearray | memoryview | np.ndarray


class AudioDecodeError(ValueError):
    """Raised when audio cannot be decoded by any available backend."""


def decode_audio(source: AudioSource, sampling_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode ``source`` to a contiguous mono float32 array at ``sampling_rate``.

    ``source`` may be a path, a binary file object, encoded bytes, or a numpy array of
    already-decoded samples at ``sampling_rate`` (shape ``(frames,)`` or
    ``(frames, channels)``; integer PCM is scaled to [-1, 1)).
    """
    if sampling_rate <= 0:
        raise ValueError(f"sampling_rate must be positive, got {sampling_rate}")

    if isinstance(source, np.ndarray):
        return _finish(_array_to_float(source), sampling_rate, sampling_rate)

    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(2, "No such audio file", str(path))
        if path.is_dir():
            raise IsADirectoryError(21, "Expected an audio file, got a directory", str(path))
        return _decode_encoded(str(path), str(path), sampling_rate)

    if isinstance(source, (bytes, bytearray, memoryview)):
        return _decode_encoded(bytes(source), "<bytes>", sampling_rate)

    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        label = str(name) if isinstance(name, (str, os.PathLike)) else "<file object>"
        if not _seekable(source):  # both backends may need to read it from the start
            return _decode_encoded(bytes(source.read()), label, sampling_rate)
        return _decode_encoded(source, label, sampling_rate)

    raise TypeError(
        "decode_audio expects a path, bytes, a binary file object or a numpy array, "
        f"got {type(source).__name__}"
    )


def _array_to_float(samples: np.ndarray) -> np.ndarray:
    """Convert raw sample arrays (float or integer PCM) to mono float32."""
    if samples.ndim == 2:  # (frames, channels): scale first so integer PCM cannot overflow
        scaled = _array_to_float(samples.reshape(-1)).reshape(samples.shape)
        return scaled.mean(axis=1, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"audio arrays must be 1-D or 2-D (frames, channels), got {samples.shape}")
    kind = samples.dtype.kind
    if kind == "f":
        return samples.astype(np.float32, copy=False)
    if kind == "i":
        scale = float(2 ** (8 * samples.dtype.itemsize - 1))
        return (samples.astype(np.float32) / np.float32(scale)).astype(np.float32, copy=False)
    if kind == "u":
        half = float(2 ** (8 * samples.dtype.itemsize - 1))
        return ((samples.astype(np.float64) - half) / half).astype(np.float32)
    raise TypeError(f"unsupported audio array dtype {samples.dtype}")


def _finish(audio: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Resample if needed and return a contiguous float32 1-D array."""
    if orig_sr != target_sr:
        audio = resample(audio, orig_sr, target_sr)
    return np.ascontiguousarray(audio, dtype=np.float32)


def _decode_encoded(source: str | bytes | BinaryIO, label: str, sampling_rate: int) -> np.ndarray:
    """Decode an encoded file with soundfile, falling back to an ffmpeg subprocess.

    A path is handed to ffmpeg by name (so it can seek); bytes and file objects go via stdin.
    """
    start = source.tell() if _seekable(source) else None
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else source
        data, file_sr = sf.read(handle, dtype="float32", always_2d=True)
    except (sf.SoundFileError, RuntimeError, ValueError, TypeError, OSError) as exc:
        sf_error = f"{type(exc).__name__}: {exc}"
    else:
        return _finish(data.mean(axis=1, dtype=np.float32), int(file_sr), sampling_rate)

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioDecodeError(
            f"could not decode audio from {label}: soundfile failed ({sf_error}) "
            "and no ffmpeg binary was found on PATH to try instead"
        )

    if isinstance(source, str):
        payload, input_arg = None, source
    else:
        if isinstance(source, bytes):
            payload = source
        else:
            if start is not None:
                source.seek(start)
            payload = source.read()
        input_arg = "-"
    cmd = [
        ffmpeg,
        *("-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "0", "-i", input_arg),
        *f"-f s16le -ac 1 -acodec pcm_s16le -ar {sampling_rate} -".split(),
    ]
    try:
        proc = subprocess.run(cmd, input=payload, capture_output=True, check=False)
    except OSError as exc:
        raise AudioDecodeError(
            f"could not decode audio from {label}: soundfile failed ({sf_error}) "
            f"and running ffmpeg failed ({exc})"
        ) from exc
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise AudioDecodeError(
            f"could not decode audio from {label}: soundfile failed ({sf_error}) "
            f"and ffmpeg exited with code {proc.returncode}: {' | '.join(detail) or 'no output'}"
        )
    pcm = np.frombuffer(proc.stdout[: len(proc.stdout) // 2 * 2], dtype="<i2")
    return np.ascontiguousarray(pcm.astype(np.float32) / np.float32(32768.0))


def _seekable(source: object) -> bool:
    """Whether ``source`` is a file object that supports seeking back to its start."""
    try:
        return bool(getattr(source, "seekable", lambda: False)())
    except (OSError, ValueError):
        return False


def resample(audio: np.ndarray, orig_sr: int, new_sr: int) -> np.ndarray:
    """Resample along the last axis with a Kaiser-windowed sinc polyphase filter.

    The output has ``ceil(n * new_sr / orig_sr)`` samples; float64 input stays float64,
    anything else comes back as float32.
    """
    if int(orig_sr) != orig_sr or int(new_sr) != new_sr or orig_sr <= 0 or new_sr <= 0:
        raise ValueError(f"sample rates must be positive integers, got {orig_sr} -> {new_sr}")
    orig_sr, new_sr = int(orig_sr), int(new_sr)
    audio = np.asarray(audio)
    dtype = np.float64 if audio.dtype == np.float64 else np.float32
    if orig_sr == new_sr:
        return np.ascontiguousarray(audio, dtype=dtype)

    g = math.gcd(orig_sr, new_sr)
    up, down = new_sr // g, orig_sr // g
    n_in = audio.shape[-1]
    n_out = -(-n_in * up // down)
    lead = audio.shape[:-1]
    if n_in == 0:
        return np.zeros((*lead, 0), dtype=dtype)

    # Cutoff as a fraction of the input Nyquist rate; half-width W in input samples.
    fc = _ROLLOFF * min(1.0, up / down)
    half_width = math.ceil(_ZERO_CROSSINGS / fc)
    # Output phase p lies at input position p * down / up within each period of `down` inputs.
    phase_pos = np.arange(up, dtype=np.int64) * down
    base = phase_pos // up  # floor of each phase's input position
    frac = (phase_pos % up) / up

    # The filter runs as dense matrix products: each row of the input view holds the inputs
    # for `reps` consecutive periods, and a banded matrix maps them to those periods' outputs
    # for a group of phases. Aiming at ~_GEMM_COLUMNS outputs per row keeps the products
    # efficient while bounding the zero-padding the banded matrices carry.
    group = min(up, _GEMM_COLUMNS)
    reps = max(1, _GEMM_COLUMNS // up)
    periods = -(-n_out // up)
    blocks = -(-periods // reps)

    x = torch.from_numpy(np.ascontiguousarray(audio.reshape(-1, n_in), dtype=dtype))
    pad_left = half_width
    plans = []
    need = 0
    for p0 in range(0, up, group):
        p1 = min(up, p0 + group)
        lo = int(base[p0]) - half_width + 1  # first tap, relative to the period start
        taps = int(base[p1 - 1]) - int(base[p0]) + 2 * half_width
        span = (reps - 1) * down + taps
        need = max(need, lo + pad_left + (blocks - 1) * reps * down + span)
        plans.append((p0, p1, lo, taps, span))
    xpad = torch.nn.functional.pad(x, (pad_left, max(0, need - pad_left - n_in)))

    out = torch.empty((x.shape[0], blocks, reps, up), dtype=x.dtype)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // max(span for *_, span in plans))
    with torch.inference_mode():
        for p0, p1, lo, taps, span in plans:
            # Distance (in input samples) from each tap to each phase's exact position.
            d = np.arange(lo, lo + taps, dtype=np.float64)[:, None] - (base[p0:p1] + frac[p0:p1])
            kernel = _windowed_sinc(d, fc, half_width)
            kernel /= kernel.sum(axis=0, keepdims=True)  # exact unit gain at DC per phase
            band = np.zeros((span, reps, p1 - p0))
            for r in range(reps):
                band[r * down : r * down + taps, r, :] = kernel
            matrix = torch.from_numpy(band.reshape(span, -1).astype(dtype))
            for b, row in enumerate(xpad):
                for r0 in range(0, blocks, rows_per_chunk):
                    r1 = min(blocks, r0 + rows_per_chunk)
                    offset = row.storage_offset() + lo + pad_left + r0 * reps * down
                    view = row.as_strided((r1 - r0, span), (reps * down, 1), offset)
                    out[b, r0:r1, :, p0:p1] = (view @ matrix).view(r1 - r0, reps, p1 - p0)
    result = out.reshape(x.shape[0], -1)[:, :n_out].numpy()
    return np.ascontiguousarray(result.reshape(*lead, n_out), dtype=dtype)


def _windowed_sinc(d: np.ndarray, fc: float, half_width: int) -> np.ndarray:
    """Low-pass impulse response at offsets ``d``: sinc with cutoff ``fc``, Kaiser window."""
    ratio = np.clip(d / half_width, -1.0, 1.0)
    window = np.i0(_KAISER_BETA * np.sqrt(1.0 - ratio**2)) / np.i0(_KAISER_BETA)
    window[np.abs(d) >= half_width] = 0.0
    return fc * np.sinc(fc * d) * window
