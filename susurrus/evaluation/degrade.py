"""Harder test speech built from recorded speech: what the shared data lacks.

* :func:`whisperize` — whispered speech: the voice's pitch is removed and only its spectral
  envelope (what makes the words) is kept, excited by noise, as in a whisper (no vocal-fold
  vibration). Per 32 ms frame the magnitude spectrum is smoothed by cepstral liftering (the
  envelope without the harmonics) and multiplied by white noise's spectrum; frames are
  overlap-added. Level is lowered as whispers are quieter.
* :func:`numbered_reading` — a short numbered opening ("1."), a pause, then continuous speech:
  the shape of a recited poem or a numbered list.
"""

from __future__ import annotations

import numpy as np

N_FFT = 512
HOP = 128


def whisperize(audio: np.ndarray, seed: int = 0, lifter: int = 40, gain_db: float = -12.0) -> np.ndarray:
    """Whispered speech from voiced speech (16 kHz mono float32)."""
    rng = np.random.default_rng(seed)
    window = np.hanning(N_FFT + 1)[:-1].astype(np.float64)
    padded = np.concatenate([np.zeros(N_FFT), audio.astype(np.float64), np.zeros(N_FFT)])
    n_frames = (len(padded) - N_FFT) // HOP + 1
    out = np.zeros(len(padded))
    norm = np.zeros(len(padded))
    for i in range(n_frames):
        seg = padded[i * HOP:i * HOP + N_FFT] * window
        spectrum = np.fft.rfft(seg)
        log_mag = np.log(np.abs(spectrum) + 1e-8)
        cepstrum = np.fft.irfft(log_mag)
        cepstrum[lifter:-lifter] = 0.0  # keep the envelope, drop the pitch harmonics
        envelope = np.exp(np.fft.rfft(cepstrum).real)
        noise = np.fft.rfft(rng.standard_normal(N_FFT) * window)
        frame = np.fft.irfft(envelope * noise / np.sqrt(np.sum(window ** 2)), N_FFT) * window
        out[i * HOP:i * HOP + N_FFT] += frame
        norm[i * HOP:i * HOP + N_FFT] += window ** 2
    out = (out / np.maximum(norm, 1e-8))[N_FFT:N_FFT + len(audio)]
    # same loudness as the input, then quieter
    rms_in = np.sqrt(np.mean(audio.astype(np.float64) ** 2)) + 1e-12
    rms_out = np.sqrt(np.mean(out ** 2)) + 1e-12
    return (out * rms_in / rms_out * 10 ** (gain_db / 20)).astype(np.float32)


def numbered_reading(number: np.ndarray, speech: np.ndarray, pause_s: float = 1.0,
                     lead_s: float = 0.5) -> np.ndarray:
    """``lead_s`` of silence, the spoken number, ``pause_s`` of silence, then ``speech``."""
    z = np.zeros
    return np.concatenate([z(int(lead_s * 16000), np.float32), number.astype(np.float32),
                           z(int(pause_s * 16000), np.float32), speech.astype(np.float32)])
