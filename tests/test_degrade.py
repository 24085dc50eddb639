"""The harder speech built from recorded speech (``susurrus.evaluation.degrade``) is what it says."""

from __future__ import annotations

import numpy as np
import pytest

from susurrus.evaluation import degrade

SR = 16000


@pytest.fixture(scope="module")
def tone() -> np.ndarray:
    """Two seconds of a 200 Hz tone with a 0.3 s gap in the middle (the quietest place)."""
    t = np.arange(2 * SR) / SR
    audio = (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    audio[int(0.9 * SR):int(1.2 * SR)] = 0.0
    return audio


def _pitch(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio[:SR // 2] * np.hanning(SR // 2)))
    return float(np.argmax(spectrum)) * SR / (SR // 2)


def test_faster_speech_is_shorter_and_higher(tone):
    fast, slow = degrade.faster(tone, 1.25), degrade.faster(tone, 0.8)
    assert len(fast) == pytest.approx(len(tone) / 1.25, abs=2)
    assert len(slow) == pytest.approx(len(tone) / 0.8, abs=2)
    assert _pitch(fast) == pytest.approx(250, abs=4) and _pitch(slow) == pytest.approx(160, abs=4)


def test_a_room_keeps_the_peak_and_rings_on(tone):
    wet = degrade.reverberate(tone, 0.6)
    assert len(wet) == len(tone) + SR // 2
    assert np.abs(wet).max() == pytest.approx(np.abs(tone).max(), rel=1e-4)
    gap = slice(int(0.95 * SR), int(1.15 * SR))  # the tone's gap now holds its decaying tail
    assert np.abs(wet[gap]).max() > 0.01 and np.abs(tone[gap]).max() == 0.0


def test_another_talker_underneath_at_the_asked_level(tone):
    other = np.random.default_rng(1).standard_normal(SR).astype(np.float32) * 0.1
    mixed = degrade.under(tone, other, -10.0)
    added = mixed.astype(np.float64) - tone
    assert len(mixed) == len(tone)
    assert 10 * np.log10(np.mean(added ** 2) / np.mean(tone.astype(np.float64) ** 2)) == pytest.approx(-10, abs=0.1)


def test_a_pause_goes_in_the_quietest_place_and_nothing_is_lost(tone):
    paused = degrade.pause_inside(tone, 4.0)
    assert len(paused) == len(tone) + 4 * SR
    quiet = np.abs(paused) < 1e-3
    assert quiet[int(1.0 * SR):int(5.0 * SR)].all()  # the pause joins the tone's own gap
    assert np.abs(paused).sum() == pytest.approx(np.abs(tone).sum(), rel=1e-3)


def test_clipping_stays_within_full_scale(tone):
    loud = degrade.clipped(tone, 18.0)
    assert np.abs(loud).max() == 1.0 and (np.abs(loud) == 1.0).mean() > 0.3
