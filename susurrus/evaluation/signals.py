"""Deterministic test signals at 16 kHz, and speech streams with controlled pauses.

Non-speech generators (seeded numpy, float32, scaled to an RMS level in dBFS): digital
silence, white noise, pink noise (1/f power, FFT-shaped) and a synthetic music-like signal
(chords of harmonic tones with envelopes, a bass line and drum-like noise bursts on a beat).
They exercise the voice-activity detector and the Whisper-side hallucination guards.

Speech with pauses, from long-form items whose ``segments`` give per-utterance boundaries:
:func:`stretch_pauses` lengthens the natural pauses between utterances to at least a given
length; :func:`insert_gaps` puts a gap of a given length (silence or any filler signal)
between consecutive utterances. Both return the new audio and the new boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

SAMPLE_RATE = 16000


def db_to_amplitude(dbfs: float) -> float:
    return float(10.0 ** (dbfs / 20.0))


def at_peak(audio: np.ndarray, dbfs: float) -> np.ndarray:
    """``audio`` scaled so that its largest sample magnitude is ``dbfs`` (float32)."""
    return (audio * (db_to_amplitude(dbfs) / max(float(np.abs(audio).max()), 1e-12))).astype(np.float32)


def rms_dbfs(x: np.ndarray) -> float:
    """RMS level in dBFS (a full-scale sine reads -3 dBFS); -inf for digital silence."""
    r = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0
    return 20.0 * np.log10(r) if r > 0 else -np.inf


def _scale(x: np.ndarray, level_dbfs: float) -> np.ndarray:
    r = np.sqrt(np.mean(np.square(x, dtype=np.float64)))
    if r > 0:
        x = x * (db_to_amplitude(level_dbfs) / r)
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def silence(seconds: float, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Digital silence."""
    return np.zeros(int(round(seconds * sr)), dtype=np.float32)


def white_noise(seconds: float, level_dbfs: float = -20.0, seed: int = 0, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Gaussian white noise at ``level_dbfs`` RMS."""
    rng = np.random.default_rng(seed)
    return _scale(rng.standard_normal(int(round(seconds * sr))), level_dbfs)


def pink_noise(seconds: float, level_dbfs: float = -20.0, seed: int = 0, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Pink (1/f power) noise at ``level_dbfs`` RMS: white noise shaped by 1/sqrt(f) in the
    frequency domain (DC removed)."""
    n = int(round(seconds * sr))
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    rng = np.random.default_rng(seed)
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / sr)
    shape = np.zeros_like(f)
    shape[1:] = 1.0 / np.sqrt(f[1:])
    return _scale(np.fft.irfft(spec * shape, n), level_dbfs)


# A I-V-vi-IV progression in C major (MIDI notes), one chord a bar.
_CHORDS = [(60, 64, 67), (55, 59, 62), (57, 60, 64), (53, 57, 60)]
_BASS = [36, 31, 33, 29]


def _midi_hz(note: float) -> float:
    return 440.0 * 2.0 ** ((note - 69) / 12.0)


def _tone(freq: float, n: int, sr: int, harmonics: int = 6, decay: float = 0.6) -> np.ndarray:
    t = np.arange(n) / sr
    out = np.zeros(n)
    for h in range(1, harmonics + 1):
        if freq * h < sr / 2:
            out += (decay ** (h - 1)) * np.sin(2 * np.pi * freq * h * t)
    return out


def _envelope(n: int, sr: int, attack: float = 0.01, release: float = 0.25) -> np.ndarray:
    """Attack, exponential decay to a sustain level, release at the end."""
    t = np.arange(n) / sr
    env = np.minimum(1.0, t / attack) * (0.6 + 0.4 * np.exp(-t / 0.3))
    r = min(n, int(release * sr))
    env[n - r:] *= np.linspace(1.0, 0.0, r)
    return env


def music(seconds: float, level_dbfs: float = -20.0, seed: int = 0, bpm: float = 110.0,
          drums: bool = True, sr: int = SAMPLE_RATE) -> np.ndarray:
    """A synthetic music-like signal at ``level_dbfs`` RMS: a four-chord progression of
    harmonic tones (one chord a bar, notes re-struck on every beat with an envelope, slightly
    detuned per seed), a bass note a bar, and with ``drums`` a kick (decaying low sine) on beats
    1 and 3, a snare (noise burst) on 2 and 4 and hi-hat ticks on eighth notes."""
    n = int(round(seconds * sr))
    rng = np.random.default_rng(seed)
    out = np.zeros(n)
    beat = int(round(60.0 / bpm * sr))
    bar = 4 * beat
    detune = rng.uniform(-0.1, 0.1)
    for b0 in range(0, n, bar):
        k = (b0 // bar) % len(_CHORDS)
        m = min(bar, n - b0)
        out[b0:b0 + m] += 0.5 * _tone(_midi_hz(_BASS[k] + detune), m, sr, harmonics=4) * _envelope(m, sr, release=0.1)
        for s0 in range(b0, b0 + m, beat):
            L = min(beat, n - s0)
            chord = sum(_tone(_midi_hz(note + detune), L, sr) for note in _CHORDS[k])
            out[s0:s0 + L] += 0.25 * chord * _envelope(L, sr, release=0.05)
    if drums:
        t = np.arange(int(0.15 * sr)) / sr
        kick = np.sin(2 * np.pi * (50 + 80 * np.exp(-t / 0.03)) * t) * np.exp(-t / 0.08)
        snare_len, hat_len = int(0.12 * sr), int(0.03 * sr)
        for i, s0 in enumerate(range(0, n, beat)):
            if i % 2 == 0:
                L = min(len(kick), n - s0)
                out[s0:s0 + L] += 1.5 * kick[:L]
            else:
                L = min(snare_len, n - s0)
                out[s0:s0 + L] += 0.6 * rng.standard_normal(L) * np.exp(-np.arange(L) / (0.04 * sr))
            for h0 in (s0, s0 + beat // 2):
                L = min(hat_len, n - h0)
                if L > 0:
                    hat = np.diff(rng.standard_normal(L + 1))  # high-passed noise
                    out[h0:h0 + L] += 0.15 * hat * np.exp(-np.arange(L) / (0.008 * sr))
    return _scale(out, level_dbfs)


GENERATORS: dict[str, Callable[..., np.ndarray]] = {
    "silence": lambda seconds, seed=0: silence(seconds),
    "white": lambda seconds, seed=0: white_noise(seconds, seed=seed),
    "pink": lambda seconds, seed=0: pink_noise(seconds, seed=seed),
    "music": lambda seconds, seed=0: music(seconds, seed=seed),
}


# ---------------------------------------------------------------------------------------------
# Speech with pauses


def _bounds(segments: Sequence[dict]) -> list[tuple[float, float]]:
    return [(float(s.get("start_s", s.get("start"))), float(s.get("end_s", s.get("end")))) for s in segments]


def _with_bounds(segments: Sequence[dict], bounds: list[tuple[float, float]]) -> list[dict]:
    out = []
    for seg, (a, b) in zip(segments, bounds):
        d = {k: v for k, v in seg.items() if k not in ("start", "end", "start_s", "end_s")}
        d["start_s"], d["end_s"] = round(a, 6), round(b, 6)
        out.append(d)
    return out


def _filler(fill: str | np.ndarray | Callable[[int, int], np.ndarray] | None, n: int, index: int) -> np.ndarray:
    if fill is None or (isinstance(fill, str) and fill == "silence"):
        return np.zeros(n, dtype=np.float32)
    if isinstance(fill, np.ndarray):
        if len(fill) < n:
            fill = np.tile(fill, -(-n // max(1, len(fill))))
        return fill[:n].astype(np.float32)
    if callable(fill):
        return np.asarray(fill(n, index), dtype=np.float32)[:n]
    raise ValueError(f"unknown filler {fill!r}")


def insert_gaps(audio: np.ndarray, segments: Sequence[dict], gap_s: float,
                fill: str | np.ndarray | Callable[[int, int], np.ndarray] | None = None,
                sr: int = SAMPLE_RATE) -> tuple[np.ndarray, list[dict]]:
    """Insert ``gap_s`` seconds between every two consecutive utterances.

    The audio is cut in the middle of each natural pause between ``segments`` (manifest
    dicts with ``start_s`` / ``end_s``) and the gap inserted there, so every pause grows by
    exactly ``gap_s``. ``fill``: None or "silence" (digital zeros), an array (tiled), or a
    callable ``(n_samples, gap_index) -> array``. Returns the new audio and segments (same
    dicts, shifted ``start_s`` / ``end_s``)."""
    audio = np.asarray(audio, dtype=np.float32)
    bounds = _bounds(segments)
    gap = int(round(gap_s * sr))
    pieces, new_bounds, cursor, shift = [], [], 0, 0
    for i, (a, b) in enumerate(bounds):
        new_bounds.append((a + shift / sr, b + shift / sr))
        if i + 1 < len(bounds):
            cut = int(round((b + bounds[i + 1][0]) / 2 * sr))
            pieces += [audio[cursor:cut], _filler(fill, gap, i)]
            cursor = cut
            shift += gap
    pieces.append(audio[cursor:])
    return np.concatenate(pieces), _with_bounds(segments, new_bounds)


def stretch_pauses(audio: np.ndarray, segments: Sequence[dict], pause_s: float,
                   fill: str | np.ndarray | Callable[[int, int], np.ndarray] | None = "room",
                   sr: int = SAMPLE_RATE) -> tuple[np.ndarray, list[dict]]:
    """Lengthen every pause between consecutive utterances to at least ``pause_s`` seconds
    (pauses already that long are kept as they are).

    ``fill`` for the added part: "room" (default) loops the pause's own audio (its background,
    mirrored back and forth so there is no click), otherwise as :func:`insert_gaps`."""
    audio = np.asarray(audio, dtype=np.float32)
    bounds = _bounds(segments)
    pieces, new_bounds, cursor, shift = [], [], 0, 0
    for i, (a, b) in enumerate(bounds):
        new_bounds.append((a + shift / sr, b + shift / sr))
        if i + 1 < len(bounds):
            s0, s1 = int(round(b * sr)), int(round(bounds[i + 1][0] * sr))
            need = int(round(pause_s * sr)) - (s1 - s0)
            if need <= 0:
                continue
            cut = (s0 + s1) // 2
            if isinstance(fill, str) and fill == "room":
                pause = audio[s0:s1]
                extra = (np.tile(np.concatenate([pause, pause[::-1]]), -(-need // max(1, 2 * len(pause))))[:need]
                         if len(pause) else np.zeros(need, dtype=np.float32))
            else:
                extra = _filler(fill, need, i)
            pieces += [audio[cursor:cut], extra.astype(np.float32)]
            cursor = cut
            shift += need
    pieces.append(audio[cursor:])
    return np.concatenate(pieces), _with_bounds(segments, new_bounds)
