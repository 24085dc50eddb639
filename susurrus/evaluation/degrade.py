"""Harder test speech built from recorded speech: what the shared data lacks.

* :func:`whisperize` — whispered speech: the voice's pitch is removed and only its spectral
  envelope (what makes the words) is kept, excited by noise, as in a whisper (no vocal-fold
  vibration). Per 32 ms frame the magnitude spectrum is smoothed by cepstral liftering (the
  envelope without the harmonics) and multiplied by white noise's spectrum; frames are
  overlap-added. Level is lowered as whispers are quieter.
* :func:`numbered_reading` — a short numbered opening ("1."), a pause, then continuous speech:
  the shape of a recited poem or a numbered list.
* :func:`faster` (speech sped up or slowed down, pitch with it, as tape played at another speed),
  :func:`reverberate` (a room: the direct sound, then a decaying diffuse tail), :func:`under`
  (another talker underneath), :func:`pause_inside` (a long pause in the middle of a sentence)
  and :func:`clipped` (a recording overdriven past full scale): conditions ``benchmarks/stress.py``
  builds from the dev set, none of which it holds.
"""

from __future__ import annotations

import numpy as np

from susurrus.audio.features import SAMPLE_RATE as SR
from susurrus.audio.io import resample
from susurrus.evaluation.signals import db_to_amplitude, rms_dbfs

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
    return np.concatenate([z(int(lead_s * SR), np.float32), number.astype(np.float32),
                           z(int(pause_s * SR), np.float32), speech.astype(np.float32)])


def faster(audio: np.ndarray, factor: float) -> np.ndarray:
    """``audio`` played ``factor`` times as fast (pitch shifted with it)."""
    return resample(audio, round(SR * factor), SR).astype(np.float32)


def reverberate(audio: np.ndarray, rt60_s: float = 0.6, seed: int = 0) -> np.ndarray:
    """``audio`` in a room whose reverberation decays 60 dB in ``rt60_s``: the direct sound, then
    from 5 ms on exponentially decaying noise (a diffuse tail) 10 dB under it; the tail kept after
    the speech, the peak as the input's."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rt60_s * 4 / 3 * SR)) / SR
    response = rng.standard_normal(len(t)) * np.exp(-np.log(1000) * t / rt60_s) * db_to_amplitude(-10.0)
    response[:int(0.005 * SR)] = 0.0
    response[0] = 1.0
    out = np.convolve(audio.astype(np.float64), response)[:len(audio) + SR // 2]
    return (out * np.abs(audio).max() / max(np.abs(out).max(), 1e-12)).astype(np.float32)


def under(audio: np.ndarray, other: np.ndarray, db: float = -10.0) -> np.ndarray:
    """``other`` (repeated or cut to the length of ``audio``) mixed in ``db`` below its power."""
    other = np.resize(other.astype(np.float64), len(audio))
    gain = db_to_amplitude(rms_dbfs(audio) + db - rms_dbfs(other)) if other.any() else 0.0
    return np.clip(audio + other * gain, -1.0, 1.0).astype(np.float32)


def pause_inside(audio: np.ndarray, pause_s: float = 4.0, seed: int = 0) -> np.ndarray:
    """``pause_s`` of near silence (noise at -80 dBFS) inserted at the quietest 100 ms of the
    middle third of ``audio`` (a speaker stopping mid-sentence; it may fall inside a word)."""
    lo, hi = len(audio) // 3, 2 * len(audio) // 3
    energy = np.convolve(audio[lo:hi].astype(np.float64) ** 2, np.ones(SR // 10), "valid")
    cut = lo + int(np.argmin(energy)) + SR // 20
    pause = np.random.default_rng(seed).standard_normal(int(pause_s * SR)) * 1e-4
    return np.concatenate([audio[:cut], pause, audio[cut:]]).astype(np.float32)


def clipped(audio: np.ndarray, gain_db: float = 18.0) -> np.ndarray:
    """``audio`` amplified by ``gain_db`` and clipped at full scale."""
    return np.clip(audio * db_to_amplitude(gain_db), -1.0, 1.0).astype(np.float32)
