"""The live engine on real speech: append-only commits, timing, accuracy, interfaces."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.session import Committed, Interim, StreamConfig


def _stream(model, audio, piece=1600, **settings):
    stream = model.stream(**settings)
    snapshots, events = [], []
    for i in range(0, len(audio), piece):
        events.extend(stream.feed(audio[i:i + piece]))
        snapshots.append(stream.text)
    events.extend(stream.finish())
    snapshots.append(stream.text)
    return stream, snapshots, events


_STREAMED: dict[tuple[int, str], tuple] = {}


def _streamed(model, item) -> tuple:
    """``_stream`` of a dev item in 100 ms pieces at the default settings, computed once per
    item: the append-only test and the word-times test read the same stream of LJ001-0001."""
    key = (id(model), item.id)
    if key not in _STREAMED:
        _STREAMED[key] = _stream(model, decode_audio(item.audio))
    return _STREAMED[key]


@pytest.mark.slow
@pytest.mark.parametrize("item_id", ["ljspeech_LJ001-0001", "librispeech_test-clean_1089-134686-0000"])
def test_committed_text_is_append_only_and_accurate(tiny, dev_item, item_id):
    item = dev_item(item_id)
    audio = decode_audio(item.audio)
    stream, snapshots, events = _streamed(tiny, item)
    # every snapshot of the committed text extends the previous one: nothing is ever revised
    for before, after in zip(snapshots, snapshots[1:]):
        assert after.startswith(before)
    committed = [e for e in events if isinstance(e, Committed)]
    assert len(committed) >= 5  # words arrive while the audio streams, not only at the end
    assert "".join(e.text for e in committed) == stream.text
    assert any(isinstance(e, Interim) and e.text for e in events)
    offline = " ".join(s.text for s in tiny.transcribe(audio, beam_size=1, temperature=0.0)[0])
    assert corpus_error_rate([(item.text, stream.text)]) <= corpus_error_rate([(item.text, offline)]) + 10


@pytest.mark.slow
def test_words_carry_times_and_are_committed_soon_after_they_are_spoken(tiny, dev_item):
    item = dev_item("ljspeech_LJ001-0001")
    audio = decode_audio(item.audio)
    stream, _, _ = _streamed(tiny, item)
    words = stream.words
    duration = len(audio) / 16000
    assert all(0 <= w.start <= w.end <= duration + 0.05 for w in words)
    assert all(a.end <= b.start + 1e-6 for a, b in zip(words, words[1:]))
    assert all(a.emitted_at <= b.emitted_at for a, b in zip(words, words[1:]))
    assert all(w.emitted_at >= w.end - 0.05 for w in words)  # nothing is committed before it is heard
    before_end = [w for w in words if w.emitted_at < duration]
    assert len(before_end) >= 0.8 * len(words)  # most words are final while audio still streams
    assert np.mean([w.emitted_at - w.end for w in words]) < 2.0


def test_feeding_in_any_piece_size_and_int16_gives_the_same_text(tiny, dev_item):
    audio = decode_audio(dev_item("ljspeech_LJ001-0002").audio)
    a, _, _ = _stream(tiny, audio, piece=1600)
    b, _, _ = _stream(tiny, (audio * 32767).astype(np.int16), piece=777)
    assert a.text == b.text and a.text.strip()


@pytest.mark.slow
def test_window_re_anchors_and_keeps_memory_flat(tiny, longform_items):
    """30 s of a long-form stream with a 10 s window: the window is re-anchored (three times),
    the decoder context stays bounded, and the text stays accurate."""
    item = longform_items[0]
    audio = decode_audio(item.audio)[: 16000 * 30]
    stream, snapshots, _ = _stream(tiny, audio, piece=16000, max_window_s=10.0)
    assert stream.window.start_frame > 0 and stream.window.mel.shape[1] <= 2 * 10 * 50 + 200
    assert len(stream.previous) <= 2 * stream.config.context_tokens
    for before, after in zip(snapshots, snapshots[1:]):
        assert after.startswith(before)
    inside = [s for s in item.segments if s["end_s"] <= 30]
    refs = " ".join(s["text"] for s in inside)
    hyp = " ".join(w.word for w in stream.words if w.end <= inside[-1]["end_s"] + 0.5)
    assert corpus_error_rate([(refs, hyp)]) < 15
    # no phrase repeated three times in a row
    words = stream.text.split()
    for n in range(1, 6):
        for i in range(len(words) - 3 * n):
            assert not (words[i:i + n] == words[i + n:i + 2 * n] == words[i + 2 * n:i + 3 * n]), words[i:i + n]


@pytest.mark.slow
def test_a_full_window_rolls_over_with_its_last_committed_words_as_left_context(tiny, longform_items):
    """A window that fills up in the middle of speech starts the next one at its committed words
    of the last ``roll_context_s``: their audio and tokens (forced, not said again), so that the
    words after them are not read as a window's opening, without left context. (16 s of speech
    in 8 s windows: two rolls, at 8.4 and 14.1 s, the second of a window that opened with carried
    words; without context, 10 s: one roll, at 8.4 s.)"""
    audio = decode_audio(longform_items[0].audio)[: 16000 * 16]
    rolls = []

    def run(context_s, audio):
        stream = tiny.stream(max_window_s=8.0, roll_context_s=context_s)
        reanchor = stream._reanchor

        def watched(*args, **kwargs):
            old, text = stream.window, stream.text
            end_s = old.start_frame / 100 + old.committed_end_frame * 0.02
            reanchor(*args, **kwargs)
            new = stream.window
            rolls.append((context_s, text, end_s, new.start_frame / 100,
                          new.start_frame / 100 + new.committed_end_frame * 0.02,
                          stream.tokenizer.decode(new.committed)))
        stream._reanchor = watched
        for i in range(0, len(audio), 1600):
            stream.feed(audio[i:i + 1600])
        stream.finish()
        return stream.text

    carried_text = run(2.0, audio)
    carried = [r for r in rolls if r[0] == 2.0 and r[5]]
    assert len(carried) >= 2
    for _, text, end_s, start_s, new_end_s, words in carried:
        assert text.endswith(words)  # the last committed words, as they were output
        assert end_s - 2.0 - 0.02 <= start_s < end_s  # ... of the last 2 s, their audio from their start
        assert abs(new_end_s - end_s) < 0.03  # the committed end stays where it was
        assert carried_text.startswith(text)
        assert not carried_text[len(text):].startswith(words)  # ... and not said again after it
    run(0.0, audio[: 16000 * 10])
    assert [r for r in rolls if r[0] == 0.0] and not [r for r in rolls if r[0] == 0.0 and r[5]]
    with pytest.raises(ValueError, match="roll_context_s"):
        StreamConfig(roll_context_s=20.0)


def test_bad_input_is_refused_and_loses_nothing(tiny, dev_item):
    audio = decode_audio(dev_item("ljspeech_LJ001-0002").audio)
    stream = tiny.stream()
    stream.feed(audio[:16000])
    with pytest.raises(ValueError, match="mono"):
        stream.feed(np.zeros((10, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        stream.feed(np.array([0.0, np.nan], dtype=np.float32))
    with pytest.raises(TypeError, match="float32 or int16"):
        stream.feed(np.zeros(10, dtype=np.int64))
    stream.feed(audio[16000:])
    stream.finish()
    clean = tiny.stream()
    clean.feed(audio)
    clean.finish()
    assert stream.text == clean.text  # the refused pieces changed nothing
    with pytest.raises(ValueError, match="policy"):
        StreamConfig(policy="guess")
    with pytest.raises(ValueError, match="latency"):
        tiny.stream("instant")


def test_agreement_policy_also_streams(tiny, dev_item):
    item = dev_item("ljspeech_LJ001-0002")
    stream, snapshots, _ = _stream(tiny, decode_audio(item.audio), policy="agreement")
    assert corpus_error_rate([(item.text, stream.text)]) < 30


@pytest.mark.slow
def test_cli_stream_writes_json_with_emission_times(dev_item, tmp_path, monkeypatch):
    """``susurrus stream FILE -f json`` and ``susurrus stream -`` (the same audio as raw PCM on
    stdin), run in-process through the CLI's entry point (the process itself, Ctrl+C and
    exit codes included, is test_cli.py's)."""
    from susurrus.cli.main import main

    item = dev_item("ljspeech_LJ001-0002")
    assert main(["stream", str(item.audio), "-f", "json", "-o", str(tmp_path), "--latency", "low"]) == 0
    doc = json.loads((tmp_path / f"{item.audio.stem}.json").read_text())
    assert doc["words"] and all({"start", "end", "emitted_at"} <= set(w) for w in doc["words"])
    assert corpus_error_rate([(item.text, doc["text"])]) < 30
    raw = (decode_audio(item.audio) * 32767).astype("<i2").tobytes()
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(raw)))
    assert main(["stream", "-", "--quiet", "-f", "txt", "--latency", "low", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "stdin.txt").read_text().strip() == doc["text"].strip()


def test_step_phase_moves_the_step_grid_and_only_it(tiny, dev_item):
    """``step_phase_ms``: the first step that much shorter, every step then at k * chunk - phase;
    whatever the pieces, and refused outside 0..chunk-1."""
    audio = decode_audio(dev_item("ljspeech_LJ001-0002").audio)
    texts: dict[int, set[str]] = {}
    for phase in (0, 200):
        for piece in (1600, 4321):
            stream = tiny.stream(vad=False, step_phase_ms=phase)
            for i in range(0, len(audio), piece):
                stream.feed(audio[i:i + piece])
            steps = [round(s.audio_time, 3) for s in stream.stats]
            expected = [round((k * 640 - phase) / 1000, 3) for k in range(1, len(audio) // 16 // 640 + 2)
                        if (k * 640 - phase) * 16 <= len(audio)]
            assert steps == expected, (phase, piece)
            stream.finish()
            texts.setdefault(phase, set()).add(stream.text)
    assert all(len(seen) == 1 for seen in texts.values())  # piece sizes never matter, phase or not
    for bad in (-1, 640, 1000):
        with pytest.raises(ValueError, match="step_phase_ms"):
            StreamConfig(step_phase_ms=bad)


@pytest.fixture(scope="module")
def bench_items(dev_item):
    """Two short English items (1.9 s and 1.8 s): what is tested is how the bench builds its
    tables, the same for any items."""
    return [dev_item("ljspeech_LJ001-0002"), dev_item("ljspeech_LJ001-0008")]


@pytest.fixture(scope="module")
def bench_cache(tmp_path_factory) -> str:
    """The bench's offline cache, shared by the bench tests: each item transcribed offline once."""
    return str(tmp_path_factory.mktemp("bench") / "offline.json")


@pytest.fixture(scope="module")
def phase_results(tiny, bench_items, bench_cache):
    """The bench at step phases 0 and 320 ms (without ``--offline-spread``)."""
    from susurrus.evaluation import bench
    from susurrus.streaming.session import stream_config

    configs = [stream_config("medium", step_phase_ms=p) for p in (0, 320)]
    return bench.run(tiny, bench_items, configs, progress=False, offline_cache=bench_cache)


@pytest.mark.slow
def test_bench_reports_what_the_phase_alone_moves(phase_results):
    from susurrus.evaluation import bench

    results = phase_results
    rows = bench.phase_rows(results)
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[0] == "640/1000/500" and cells[1] == "0, 320"
    assert cells[2] == " / ".join(f"{r.wer:.2f}" for r in results)
    per_phase = [int(n) for n in cells[5].split(" / ")]
    assert int(cells[6]) <= min(per_phase) <= max(per_phase) <= int(cells[7])
    unlike = sum(a.stream_text != b.stream_text for a, b in zip(results[0].items, results[1].items))
    assert cells[8] == f"{unlike} of 2"
    report = bench.report(results)
    assert "Step phases" in report and "640/1000/500 phase 320" in report


@pytest.mark.slow
def test_bench_reports_how_far_offline_moves_from_itself(tiny, bench_items, bench_cache, phase_results):
    """``susurrus bench --offline-spread``: every item also transcribed offline 10 ms later (one
    mel frame of digital silence before it), scored, counted beside the stream, and cached (in
    the cache the phase run filled with the items' own offline transcriptions)."""
    from susurrus.evaluation import bench, reference, spread
    from susurrus.evaluation.metrics import error_counts
    from susurrus.streaming.session import stream_config

    items = bench_items
    assert not any("|lead" in key for key in json.loads(Path(bench_cache).read_text()))
    results = bench.run(tiny, items, [stream_config("medium")], progress=False, offline_cache=bench_cache,
                        offline_spread=True)
    for item, res in zip(items, results[0].items):
        later = reference.offline_reference(tiny, spread.shifted(decode_audio(item.audio)), "en")[0]
        assert res.shifted_errors == error_counts(item.text, later)[0]
    kept = json.loads(Path(bench_cache).read_text())
    assert sum(key.endswith(f"|lead{spread.SHIFT_SAMPLES}") for key in kept) == 2
    row = results[0].spread_row()
    cells = [c.strip() for c in row.strip("|").split("|")]
    worse, better = spread.counts([(i.wer(), i.offline_wer()) for i in results[0].items])
    assert cells[1] == "2" and cells[2] == f"{worse} / {better}"
    assert "noise floor" in bench.report(results)
    assert phase_results[0].spread_row() is None  # a run without --offline-spread has none


@pytest.mark.slow
def test_the_diagnosis_oracle_streams_over_a_whole_window_encoding(tiny, dev_item):
    """``benchmarks/diagnostics/base_diagnosis.py``'s oracle row (``encoder=padded``): the engine's decoder
    and policy over the window encoded whole at every step. Its cross-attention update is a step
    generator like the session's own (it once returned None there and the row crashed)."""
    from susurrus.evaluation.diagnosis import build_config, parse_overrides, session_class

    item = dev_item("ljspeech_LJ001-0002")
    overrides = parse_overrides("encoder=padded")
    config = build_config(overrides, language="en")
    cls = session_class(overrides)
    assert cls is not type(tiny.stream())
    session = cls(tiny.net, tiny.tokenizer, config, None, None)
    block = config.chunk_ms * 16
    audio = decode_audio(item.audio)
    for i in range(0, len(audio), block):
        session.feed(audio[i:i + block])
    session.finish()
    assert session.text.strip() and corpus_error_rate([(item.text, session.text)]) < 15
