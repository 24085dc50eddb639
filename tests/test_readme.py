"""The README's Python snippets (and docs/clients.md's), run as written, each in a fresh namespace,
on the example clip shipped with the package: the only change is the test server's address for
the clients'."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from server_helpers import server_samples, stream_text

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import normalize

REPO = Path(__file__).resolve().parents[1]
REPO_README = REPO / "README.md"
CLIENTS = REPO / "docs" / "clients.md"
# each README snippet, by a line only it has: every snippet must be one of these (so none goes untested)
MARKERS = {"transcribe": "model.transcribe(", "live": "stream.events(", "many": "model.streams()",
           "rest": "audio.transcriptions.create", "sdk": "client.realtime.connect", "livekit": "livekit.plugins"}


def readme_snippets(path: Path = REPO_README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def snippet(name: str, path: Path = REPO_README) -> str:
    found = [s for s in readme_snippets(path) if MARKERS.get(name, name) in s]
    assert len(found) == 1, f"{path.name}: {len(found)} snippets with {MARKERS.get(name, name)!r}"
    return found[0]


def test_every_readme_snippet_is_one_the_tests_run():
    for code in readme_snippets():
        assert sum(marker in code for marker in MARKERS.values()) == 1, code


def _run(code: str, namespace: dict | None = None) -> tuple[str, dict]:
    namespace = {} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    return out.getvalue(), namespace


def _example_at_24khz() -> np.ndarray:
    return (decode_audio(susurrus.example_audio(), sampling_rate=24000) * 32767).astype(np.int16)


@pytest.mark.slow
def test_the_readmes_python_snippets_run_as_written(server, tiny):
    audio = decode_audio(susurrus.example_audio())
    transcribe, live, many, sdk = (snippet(name) for name in ("transcribe", "live", "many", "sdk"))
    assert "ws://127.0.0.1:8000/v1" in sdk

    printed, _ = _run(transcribe)
    assert printed.startswith("[0.") and printed.rstrip().endswith("country.")

    printed, _ = _run(live)
    assert printed.strip() == stream_text(tiny, audio)
    assert printed.strip().endswith("what you can do for your country.")  # the last words, from finish

    _, namespace = _run(many)  # two calls, one fed the whole recording and one its first 4 s
    calls, events, last = namespace["calls"], namespace["events"], namespace["last"]
    assert set(events) == set(last) == set(calls.values())
    assert calls["left"].text.strip() == stream_text(tiny, audio)
    assert calls["right"].text.strip() == stream_text(tiny, audio[:4 * 16000])

    with warnings.catch_warnings():
        # the SDK opens its connection with websockets' plain connect(), deprecated in websockets 17.1
        # outside a `with` (the tests' own SDK calls pass legacy=True; a user never sees it: Python
        # hides a library's DeprecationWarning), and the README stays right for every version
        warnings.filterwarnings("ignore", r"connect\(\) must be used as a context manager", DeprecationWarning)
        printed, _ = _run(sdk.replace("ws://127.0.0.1:8000/v1", f"ws://{server.host}:{server.port}/v1"))
    deltas, transcript = printed.rstrip("\n").rsplit("\n", 1)
    assert transcript == deltas == stream_text(tiny, server_samples(_example_at_24khz(), 24000))


@pytest.mark.slow
def test_the_readmes_rest_and_agent_snippets_run_as_written(server, tiny):
    """The REST snippet (official SDK), docs/clients.md's OpenAI Agents SDK snippet and the
    LiveKit plugin's (it only builds the STT: using it needs a LiveKit job, or what
    tests/test_agent_clients.py does), at the test server's address."""
    rest, livekit = snippet("rest"), snippet("livekit")
    agents = snippet("agents.voice", CLIENTS)
    url = f"{server.http_url}/v1"
    assert rest.count("http://127.0.0.1:8000/v1") == 1
    printed, _ = _run(rest.replace("http://127.0.0.1:8000/v1", url))
    first, *srt, streamed = printed.rstrip("\n").split("\n")  # json's text, the srt file, the deltas
    assert normalize(first).startswith("and so my fellow americans")
    assert srt[0] == "1" and srt[1].startswith("00:00:00,")
    assert streamed == stream_text(tiny, decode_audio(susurrus.example_audio()))

    printed, _ = _run(agents.replace("http://127.0.0.1:8000/v1", url))
    assert normalize(printed).startswith("and so my fellow americans")
    assert printed.strip().endswith("country.")

    _, namespace = _run(livekit.replace("http://127.0.0.1:8000/v1", url))
    assert namespace["stt"].model == "gpt-4o-transcribe" and namespace["stt"].capabilities.streaming


def readme_shell_lines() -> list[str]:
    """Each command of the README's ``bash`` blocks, its comment cut off."""
    blocks = re.findall(r"```bash\n(.*?)```", REPO_README.read_text(), flags=re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def _env() -> dict[str, str]:
    """This environment with its Python's scripts first on PATH (``susurrus`` as the venv has it)."""
    import os
    import sys

    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _shell(line: str, cwd: Path, timeout: float = 300) -> str:
    import subprocess

    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_readmes_shell_commands_run_as_written(tmp_path, dev_item):
    """The README's command lines as written, in a fresh folder: transcribe the example to srt,
    stream it at real time, serve (until /healthz answers), and the speaker lines on recordings
    made under the names they use (two voices, and another recording of the second voice as
    Ann's reference). Not run here: the set-up (CI runs it), the microphone lines (``arecord``) and the
    benchmark over the data sets (minutes; ``susurrus bench`` has its own tests)."""
    import socket
    import subprocess
    import time
    import urllib.request

    import soundfile as sf

    lines = readme_shell_lines()
    skipped = [ln for ln in lines if ln.startswith(("python3 -m venv", "python -m pytest", "pip install", "arecord",
                                                     "susurrus bench"))]
    run = [ln for ln in lines if ln not in skipped]
    assert len(run) == 5, run  # transcribe, stream, serve, the two speaker lines

    transcribe, stream, serve, *speakers = run
    _shell(transcribe, tmp_path)
    srt = next((tmp_path / "transcripts").glob("*.srt")).read_text()
    assert srt.startswith("1\n00:00:00,") and "ask not" in normalize(srt)
    printed = _shell(stream, tmp_path)
    assert normalize(printed).rstrip().endswith("what you can do for your country")

    jfk, reader = decode_audio(dev_item("jfk_inaugural").audio), decode_audio(
        dev_item("librispeech_test-clean_1089-134686-0000").audio)
    sf.write(tmp_path / "meeting.wav", np.concatenate([jfk, np.zeros(8000, np.float32), reader[: 9 * 16000]]), 16000)
    sf.write(tmp_path / "call.wav", np.concatenate([jfk, np.zeros(8000, np.float32), reader[: 9 * 16000]]), 16000)
    # Ann's reference: another recording of the same reader (LibriSpeech speaker 1089)
    sf.write(tmp_path / "ann.wav", decode_audio(dev_item("librispeech_test-clean_1089-134686-0001").audio), 16000)
    _shell(speakers[0], tmp_path)
    labelled = (tmp_path / "meeting.srt").read_text()
    assert "S1" in labelled and "S2" in labelled
    printed = _shell(speakers[1], tmp_path)
    assert "Ann" in printed

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("port 8000 is taken here: the README's serve line listens there")
    proc = subprocess.Popen(["bash", "-c", f"exec {serve}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env())
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8000/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()[-2000:]
                assert time.monotonic() < deadline, "serve did not answer /healthz in 120 s"
                time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
