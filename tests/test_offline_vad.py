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
    spans = speech_spans(probs, 100 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=100)
    # frames 10 and 12 in one span; every cut on the 160-sample mel hop (23 and 91 * 512 are not)
    assert spans == [(5 * 512, 11840), (75 * 512, 46720)]
    assert all(a % 160 == 0 and b % 160 == 0 for a, b in spans)
    times = TimeMap(tuple(spans))
    assert times.original(0.0) == round(5 * 512 / 16000, 3)
    first = (11840 - 5 * 512) / 16000  # the first span's length: its end, or the second span's start
    assert times.original(first, end=True) == round(11840 / 16000, 3)
    assert times.original(first) == round(75 * 512 / 16000, 3)


def test_a_cut_shorter_than_min_cut_is_not_made():
    """Non-speech shorter than ``min_cut_ms`` stays, between stretches and at the file's edges:
    cutting it removes nothing to read speech into and only changes what Whisper hears."""
    probs = np.zeros(200, np.float32)  # 6.4 s
    probs[[20, 60, 190]] = 0.9
    # pads 160 / 320 ms: stretches (15, 31), (55, 71), (185, 200) frames; gaps 0.77 s and 3.7 s
    assert speech_spans(probs, 200 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=1000) == [
        (0, 36480), (185 * 512, 200 * 512)]  # 71 * 512 is not on the hop: 36480 is
    # the file's edges: 0.48 s before the first stretch is cut at min_cut 0.4 s and kept at 0.5 s
    assert speech_spans(probs, 200 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=400)[0][0] == 15 * 512
    assert speech_spans(probs, 200 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=500)[0][0] == 0
    # and after the last one: 1.47 s is cut (at the hop after frame 134), 0.29 s kept
    tail = np.zeros(180, np.float32)
    tail[[100, 123]] = 0.9  # one stretch, frames 95 to 134
    assert speech_spans(tail, 180 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=1000) == [(95 * 512, 68640)]
    assert speech_spans(tail[:120], 120 * 512, pad_before_ms=160, pad_after_ms=320, min_cut_ms=1000) == [
        (95 * 512, 120 * 512)]
