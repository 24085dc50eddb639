"""The prepared GPU check (benchmarks/gpu_check.py, issue 69) finishes whatever fails: a server
that does not start is a row of the table (printed, and in the JSON), a missing module is named
in one line and skips the parts that need it, an out-of-memory ends one stream count of a sweep,
the pytest part keeps the tail of a failing run, and the server part's clients give up."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks")]

import gpu_check  # noqa: E402
import gpu_check_parts as gp  # noqa: E402
import server_concurrency as sc  # noqa: E402

from susurrus.streaming.batch import BatchError, StreamBatch  # noqa: E402


@pytest.fixture
def broken_data(tmp_path, dev_items) -> Path:
    """A data folder as ``--prepare`` lays it out, two real dev recordings in its manifest, and a
    tiny.en folder whose weights file is empty: a server given it exits as it loads the model."""
    data = tmp_path / "gpu_data"
    (data / "tiny.en").mkdir(parents=True)
    (data / "tiny.en" / "model.safetensors").write_bytes(b"")
    (data / "dev").mkdir()
    items = [i for i in dev_items if i.language == "en" and i.duration_s < 4][:2]
    (data / "dev" / "manifest.jsonl").write_text("".join(json.dumps(
        {"id": i.id, "text": i.text, "duration_s": i.duration_s, "language": "en", "audio": str(i.audio)}) + "\n"
        for i in items))
    return data


def rows_of(out: str) -> dict[str, str]:
    return {line.split(" | ")[0][2:]: line.split(" | ", 1)[1] for line in out.splitlines() if line.startswith("| ")}


def test_a_server_that_does_not_start_is_a_row(broken_data, tmp_path, capsys):
    out = tmp_path / "check.json"
    code = gpu_check.main(["--data", str(broken_data), "--device", "cpu", "--quick", "--out", str(out),
                           "--skip", "tests,dev,latency,sweep", "--budget", "120"])
    assert code == 0
    printed = capsys.readouterr().out
    rows = rows_of(printed)
    assert "| check | result |" in printed and "server" in rows and "seconds" in rows, printed
    assert "failed" in rows["server"] and "the server exited" in rows["server"], printed
    assert "its output ends" in rows["server"], printed  # the server's own reason, on the same line
    report = json.loads(out.read_text())
    assert "the server exited" in report["server"]["failed"]
    assert report["requirements"].startswith("requirements:")
    assert set(report["seconds"]) == {"total", "server"}


def test_a_missing_module_is_named_and_its_parts_skipped(broken_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "websockets", None)  # import websockets now raises ImportError
    missing, line = gpu_check.requirements("cpu")
    assert "websockets" in missing and missing["websockets"] == ("server",)
    assert line.startswith("requirements: missing websockets (skips server)"), line
    out = tmp_path / "check.json"
    assert gpu_check.main(["--data", str(broken_data), "--device", "cpu", "--out", str(out),
                           "--skip", "tests,dev,latency,sweep"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "requirements: missing websockets (skips server)"
    assert sum("missing" in line for line in printed.splitlines()) == 2  # the line, and the server's row
    assert json.loads(out.read_text())["server"] == {"skipped": "missing websockets"}
    # nothing missing: the line says so
    monkeypatch.undo()
    assert gpu_check.requirements("cpu", ["server"])[1] == "requirements: all present"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
def test_no_gpu_skips_the_device_parts():
    missing, line = gpu_check.requirements("cuda")
    lacking = [name for name in missing if name.startswith("a CUDA GPU")]
    assert lacking and missing[lacking[0]] == ("dev", "latency", "sweep", "server"), line
    assert "sees none" in line


def test_unknown_part_in_skip_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--skip", "tests,sweeps"])
    assert "unknown part(s) sweeps" in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["OutOfMemoryError", "BatchError", "ValueError"])
def test_an_oom_ends_one_count_of_the_sweep(fault, tiny_float32, dev_item, monkeypatch):
    """Counts 1, 2, 3 of real tiny.en streams; the batch of 2 fails in its second round. An
    out-of-memory (torch's, or wrapped as the batch raises it) is count 2's row, and count 3
    still runs; any other error is not taken for one. Every stream is fed a full chunk every
    round: its 0.5 s recording loops for the whole count."""
    from susurrus.audio.io import decode_audio

    clip = decode_audio(dev_item("jfk_inaugural").audio)[:8000]
    feed, seen = StreamBatch.feed, []

    def failing_feed(self, pieces):
        n = len(pieces)
        seen.append((n, [len(p) for p in pieces.values()],
                     min(float(np.abs(p).max()) if len(p) else 0.0 for p in pieces.values())))
        if [m for m, _, _ in seen].count(2) == 2 and n == 2:  # the second round of the batch of 2
            oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            raise {"OutOfMemoryError": oom, "BatchError": BatchError(dict.fromkeys(pieces, oom), {}),
                   "ValueError": ValueError("a planted fault")}[fault]
        return feed(self, pieces)

    monkeypatch.setattr(StreamBatch, "feed", failing_feed)
    got = []
    if fault == "ValueError":
        with pytest.raises(ValueError, match="a planted fault"):
            gp.sweep(tiny_float32, [clip], [1, 2, 3], 1.3, time.monotonic() + 300, got.append)
        assert [row["streams"] for row in got] == [1]
        return
    rows = gp.sweep(tiny_float32, [clip], [1, 2, 3], 1.3, time.monotonic() + 300, got.append)
    assert rows == got and [row["streams"] for row in rows] == [1, 2, 3]
    assert "CUDA out of memory" in rows[1]["oom"] and "rounds" not in rows[1]
    for row in rows[0], rows[2]:
        assert row["rounds"] == 3 and isinstance(row["held"], bool), row
    assert [n for n, _, _ in seen] == [1] * 3 + [2] * 2 + [3] * 3
    assert all(lengths == [10240] * n and loud > 0 for n, lengths, loud in seen)


def test_the_deadline_skips_the_counts_left(tiny_float32):
    rows = gp.sweep(tiny_float32, [np.zeros(16000, np.float32)], [1, 2], 1.0, time.monotonic() - 1)
    assert rows == [{"streams": 1, "skipped": "the deadline passed"}, {"streams": 2, "skipped": "the deadline passed"}]


def test_the_tests_part_runs_without_addopts_and_keeps_the_tail(broken_data, tmp_path):
    """The project's addopts (``-n auto``) are not used: a folder whose own ini asks for an option
    nobody has still runs, and the planted failure is in the row's tail."""
    folder = tmp_path / "planted"
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\nmarkers =\n    cuda: planted\n")
    (folder / "test_planted.py").write_text(
        "import sys\nimport pytest\n\n\n@pytest.mark.cuda\ndef test_planted():\n"
        "    print('to stderr', file=sys.stderr)\n    assert 1 == 2, 'the planted failure'\n")
    rows = {}
    ctx = gp.Context(broken_data, "cpu", True, lambda key, value, many=False: rows.__setitem__(key, value))
    row = gp.tests_part(ctx, time.monotonic() + 120, target=str(folder / "test_planted.py"))
    assert rows["cuda tests"] == row
    assert row["returncode"] == 1 and "1 failed" in row["summary"], row
    assert "the planted failure" in row["tail"], row


def test_budget_shares():
    start = time.monotonic()
    budget = gpu_check.Budget(100.0, ["tests", "sweep"], start)
    first = budget.deadline("tests") - start
    assert abs(first - 100 * 45 / (45 + 160)) < 1
    assert budget.deadline("sweep") - start == pytest.approx(100, abs=1)  # what tests left goes on


@pytest.mark.parametrize("answer", ["nothing", "failed"])
def test_server_clients_give_up(answer):
    """A client whose server never completes its transcript gives up at its limit; one whose
    transcription fails ends at once with the failure's message."""
    import websockets

    async def server(ws) -> None:
        async for message in ws:
            if answer == "failed" and json.loads(message)["type"] == "input_audio_buffer.commit":
                await ws.send(json.dumps({"type": "conversation.item.input_audio_transcription.failed",
                                          "error": {"code": "transcription_failed", "message": "planted"}}))

    async def run() -> sc.Result:
        r = sc.Result("one", 0.3, "", np.zeros(int(0.3 * sc.RATE), np.int16))
        async with websockets.serve(server, "127.0.0.1", 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            await sc.run_client_within(f"ws://127.0.0.1:{port}", r, time.perf_counter(), 1.0)
        return r

    t0 = time.perf_counter()
    r = asyncio.run(run())
    took = time.perf_counter() - t0
    if answer == "nothing":
        assert r.failed == "no completed transcript 1 s after the audio ended" and 1.2 < took < 5, (r.failed, took)
    else:
        assert r.failed == "planted" and r.errors == ["transcription_failed"] and took < 1.2, (r.failed, took)


def test_a_random_shape_has_its_checkpoints_heads_and_english(tmp_path):
    """base at random init (as the check builds it) reads the alignment heads of OpenAI's base,
    not the default upper half, and its streams are told the language (no detection each)."""
    from susurrus.model.heads import KNOWN_HEADS, default_heads
    from susurrus.model.vocabulary import tokenizer_json

    (tmp_path / "tokenizers").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "tokenizers" / "51865.json").write_text(tokenizer_json(tmp_path / "empty", 51865)[0])
    model = gp.random_model("base", "cpu", "float32", tmp_path)
    heads = sorted(map(tuple, torch.nonzero(model.net.alignment_heads).tolist()))
    name, known = KNOWN_HEADS[(80, 51865, 512, 6, 6)]
    assert name == "base" and heads == sorted(known) != sorted(default_heads(model.net.dims))
    assert model.stream(**gp.language_of(model)).config.language == "en"
