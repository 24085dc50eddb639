"""The README's Python snippets, run as written: the only changes are a real recording for the
placeholders (``speech.wav``, ``microphone_blocks()``, ``blocks_of_24khz_int16()``) and the
test server's address for the SDK's."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from server_helpers import pcm16_at, server_samples, stream_text

from susurrus.audio.io import decode_audio

REPO_README = Path(__file__).resolve().parents[1] / "README.md"
JFK = "jfk_inaugural"  # 11 s, ends "... ask what you can do for your country."
SHORT = "ljspeech_LJ001-0002"  # 1.9 s: "in being comparatively modern."


def readme_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", REPO_README.read_text(), flags=re.S)


def _run(code: str, namespace: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    return out.getvalue()


def test_the_readmes_python_snippets_run_as_written(server, tiny, dev_item):
    path = dev_item(JFK).audio
    audio = decode_audio(path)
    pcm24 = pcm16_at(audio, 24000)

    def microphone_blocks() -> Iterator[np.ndarray]:
        pcm = (audio * 32767).astype(np.int16)
        for i in range(0, len(pcm), 1600):  # 100 ms blocks, as a sound card delivers them
            yield pcm[i:i + 1600]

    def blocks_of_24khz_int16() -> Iterator[np.ndarray]:
        for i in range(0, len(pcm24), 2400):
            yield pcm24[i:i + 2400]

    transcribe, live, many, sdk, *servers = readme_snippets()
    assert '"speech.wav"' in transcribe and "ws://127.0.0.1:8000/v1" in sdk
    namespace: dict = {"microphone_blocks": microphone_blocks, "blocks_of_24khz_int16": blocks_of_24khz_int16}

    printed = _run(transcribe.replace('"speech.wav"', repr(str(path))), namespace)
    assert printed.startswith("[0.30 -> ") and printed.rstrip().endswith("country.")

    printed = _run(live, namespace)
    expected = stream_text(tiny, (audio * 32767).astype(np.int16).astype(np.float32) / 32768)
    assert printed.strip() == expected
    assert printed.strip().endswith("what you can do for your country.")  # the last words, from finish

    # many streams stepped together: two calls, one fed the whole recording and one its first 4 s
    namespace.update(open_calls=["left", "right"], new_audio={"left": audio, "right": audio[:4 * 16000]})
    _run(many, namespace)
    calls, events, last = namespace["calls"], namespace["events"], namespace["last"]
    assert set(events) == set(last) == set(calls.values())
    assert calls["left"].text.strip() == stream_text(tiny, audio)
    assert calls["right"].text.strip() == stream_text(tiny, audio[:4 * 16000])

    with warnings.catch_warnings():
        # the SDK opens its connection with websockets' plain connect(), deprecated in websockets 17.1
        # outside a `with` (the tests' own SDK calls pass legacy=True; a user never sees it: Python
        # hides a library's DeprecationWarning), and the README stays right for every version
        warnings.filterwarnings("ignore", r"connect\(\) must be used as a context manager", DeprecationWarning)
        printed = _run(sdk.replace("ws://127.0.0.1:8000/v1", f"ws://{server.host}:{server.port}/v1"), namespace)
    deltas, transcript = printed.rstrip("\n").rsplit("\n", 1)
    assert transcript == deltas == stream_text(tiny, server_samples(pcm24, 24000))


def test_the_readmes_rest_and_agent_snippets_run_as_written(server, tiny, dev_item):
    """The REST snippet (official SDK), the OpenAI Agents SDK snippet and the LiveKit plugin's
    (it only builds the STT: using it needs a LiveKit job, or what tests/test_agent_clients.py
    does), on a short recording and the test server's address."""
    *_, rest, agents, livekit = readme_snippets()
    path = dev_item(SHORT).audio
    audio = decode_audio(path)
    pcm24 = pcm16_at(audio, 24000)
    url = f"{server.http_url}/v1"
    assert '"speech.wav"' in rest and rest.count("http://127.0.0.1:8000/v1") == 1
    printed = _run(rest.replace('"speech.wav"', repr(str(path))).replace("http://127.0.0.1:8000/v1", url), {})
    first, *srt, streamed = printed.rstrip("\n").split("\n")  # json's text, the srt file, the deltas
    assert first.lower().startswith("in being comparatively modern")
    assert srt[0] == "1" and srt[1].startswith("00:00:00,000 --> ")
    assert streamed == stream_text(tiny, audio)

    def blocks_of_24khz_int16() -> Iterator[np.ndarray]:
        for i in range(0, len(pcm24), 2400):
            yield pcm24[i:i + 2400]

    printed = _run(agents.replace("http://127.0.0.1:8000/v1", url), {"blocks_of_24khz_int16": blocks_of_24khz_int16})
    assert printed.strip().lower().startswith("in being comparatively modern")

    namespace: dict = {}
    _run(livekit.replace("http://127.0.0.1:8000/v1", url), namespace)
    assert namespace["stt"].model == "gpt-4o-transcribe" and namespace["stt"].capabilities.streaming
