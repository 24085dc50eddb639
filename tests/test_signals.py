"""Deterministic test signals and speech streams with controlled pauses."""

from __future__ import annotations

import numpy as np
import pytest

from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals


@pytest.mark.parametrize("kind", ["white", "pink", "music"])
def test_generators_are_deterministic_and_levelled(kind):
    gen = signals.GENERATORS[kind]
    a, b, c = gen(2.0, seed=1), gen(2.0, seed=1), gen(2.0, seed=2)
    assert a.dtype == np.float32 and len(a) == 32000
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert abs(signals.rms_dbfs(a) - (-20.0)) < 0.5
    assert np.abs(a).max() <= 1.0


def test_silence_is_digital_zero():
    x = signals.silence(1.5)
    assert len(x) == 24000 and not x.any() and signals.rms_dbfs(x) == -np.inf


def test_pink_noise_has_equal_power_per_octave():
    x = signals.pink_noise(8.0, seed=0).astype(np.float64)
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / 16000)
    bands = [power[(f >= lo) & (f < 2 * lo)].sum() for lo in (125, 250, 500, 1000, 2000, 4000)]
    db = 10 * np.log10(np.array(bands) / bands[0])
    assert np.abs(db).max() < 1.5  # 1/f: each octave holds the same power
    w = signals.white_noise(8.0, seed=0).astype(np.float64)
    pw = np.abs(np.fft.rfft(w)) ** 2
    assert pw[(f >= 4000) & (f < 8000)].sum() / pw[(f >= 125) & (f < 250)].sum() > 20  # white: not


def test_music_has_a_beat():
    x = signals.music(4.0, bpm=120.0)
    env = np.sqrt(np.mean(x[: len(x) // 400 * 400].reshape(-1, 400) ** 2, axis=1))  # 25 ms frames
    spec = np.abs(np.fft.rfft(env - env.mean()))
    freqs = np.fft.rfftfreq(len(env), 0.025)
    peak = freqs[1 + np.argmax(spec[1:])]
    assert peak == pytest.approx(2.0, abs=0.3) or peak == pytest.approx(4.0, abs=0.3)  # beats or eighths


def _segments():
    return [{"id": "a", "start_s": 0.0, "end_s": 1.0, "text": "one"},
            {"id": "b", "start_s": 1.4, "end_s": 2.0, "text": "two"},
            {"id": "c", "start_s": 2.7, "end_s": 3.0, "text": "three"}]


def test_insert_gaps_moves_boundaries_and_keeps_speech():
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(3 * 16000).astype(np.float32)
    new, segs = signals.insert_gaps(audio, _segments(), 1.5)
    assert len(new) == len(audio) + 2 * 24000
    assert [(s["start_s"], s["end_s"]) for s in segs] == [(0.0, 1.0), (2.9, 3.5), (5.7, 6.0)]
    assert [s["text"] for s in segs] == ["one", "two", "three"]
    for old, s in zip(_segments(), segs):
        a0, a1 = int(old["start_s"] * 16000), int(old["end_s"] * 16000)
        b0 = int(round(s["start_s"] * 16000))
        np.testing.assert_array_equal(new[b0:b0 + a1 - a0], audio[a0:a1])
    assert not new[int(1.2 * 16000) + 10: int(2.7 * 16000) - 10].any()  # the gap is digital silence
    noisy, _ = signals.insert_gaps(audio, _segments(), 0.5, fill=lambda n, i: signals.pink_noise(n / 16000, seed=i))
    assert len(noisy) == len(audio) + 16000


def test_stretch_pauses_to_a_minimum():
    audio = np.random.default_rng(1).standard_normal(3 * 16000).astype(np.float32) * 0.1
    new, segs = signals.stretch_pauses(audio, _segments(), 0.6)
    pauses = [b["start_s"] - a["end_s"] for a, b in zip(segs, segs[1:])]
    assert pauses == pytest.approx([0.6, 0.7])  # 0.4 s grew to 0.6 s, 0.7 s was already long enough
    assert len(new) == len(audio) + int(0.2 * 16000)


def test_gaps_on_real_long_form_stream(longform_items):
    item = longform_items[0]
    audio = decode_audio(str(item.audio))[: int(item.segments[2]["end_s"] * 16000) + 1600]
    new, segs = signals.insert_gaps(audio, item.segments[:3], 2.0)
    assert len(new) == len(audio) + 2 * 32000
    for old, s in zip(item.segments[:3], segs):
        a0, a1 = int(old["start_s"] * 16000), int(old["end_s"] * 16000)
        b0 = int(round(s["start_s"] * 16000))
        np.testing.assert_allclose(new[b0 + 10:b0 + a1 - a0 - 10], audio[a0 + 10:a1 - 10])
