"""Offline transcription gated by voice activity, as the stream is: silence and noise give no
text (Whisper alone reads "You" into digital silence), and speech after a long silence keeps its
times in the original audio."""

from __future__ import annotations

import numpy as np
import pytest

from susurrus.audio.io import decode_audio
from susurrus.decoding.gate import TimeMap, speech_spans
from susurrus.evaluation.metrics import normalize

JFK = "jfk_inaugural"  # 11 s: "And so my fellow Americans ... ask what you can do for your country."


@pytest.mark.slow
def test_silence_and_noise_give_no_text(tiny):
    silence = np.zeros(30 * 16000, np.float32)
    assert [s.text for s in tiny.transcribe(silence, vad=False)[0]] == [" You"]  # what the gate is for
    rng = np.random.default_rng(0)
    for audio in (silence, (rng.standard_normal(30 * 16000) * 0.05).astype(np.float32),  # white noise
                  (rng.standard_normal(30 * 16000) * 0.001).astype(np.float32)):  # a quiet hiss
        segments, info = tiny.transcribe(audio)
        assert list(segments) == [] and info.duration == 30.0 and info.duration_after_vad == 0.0


@pytest.mark.slow
def test_speech_keeps_its_times_in_the_original_audio(tiny, dev_item):
    jfk = decode_audio(dev_item(JFK).audio)
    audio = np.concatenate([np.zeros(20 * 16000, np.float32), jfk])
    segments, info = tiny.transcribe(audio, beam_size=1, word_timestamps=True)
    segments = list(segments)
    alone = list(tiny.transcribe(jfk, beam_size=1, word_timestamps=True, vad=False)[0])
    assert normalize(" ".join(s.text for s in segments)) == normalize(" ".join(s.text for s in alone))
    assert info.duration == len(audio) / 16000 and info.duration_after_vad < 13
    ours = [w for s in segments for w in s.words]
    theirs = [w for s in alone for w in s.words]
    assert len(ours) == len(theirs) and ours[0].start >= 20  # the original time base: 20 s later
    assert abs(ours[0].start - 20 - theirs[0].start) < 0.3 and abs(ours[-1].end - 20 - theirs[-1].end) < 0.3
    assert abs(sum(w.start for w in ours) / len(ours) - 20 - sum(w.start for w in theirs) / len(theirs)) < 0.1


def test_spans_are_padded_and_merged_and_times_map_back():
    probs = np.zeros(100, np.float32)  # 3.2 s of 32 ms frames
    probs[[10, 12, 80]] = 0.9
    spans = speech_spans(probs, 100 * 512, pad_before_ms=160, pad_after_ms=320)
    assert spans == [(5 * 512, 23 * 512), (75 * 512, 91 * 512)]  # frames 10 and 12 in one span
    times = TimeMap(tuple(spans))
    assert times.original(0.0) == round(5 * 512 / 16000, 3)
    first = 18 * 512 / 16000  # the first span's length: its end, or the second span's start
    assert times.original(first, end=True) == round(23 * 512 / 16000, 3)
    assert times.original(first) == round(75 * 512 / 16000, 3)
