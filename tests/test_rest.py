"""The REST API (``/v1/audio/transcriptions``, ``/v1/audio/translations``, ``/v1/models``) with the
official OpenAI SDK against a real server on loopback: every response format equals what
``susurrus transcribe`` writes for the same file; ``stream=True`` is ``susurrus stream`` as it
commits; translations with the multilingual base; bad input gets OpenAI's error bodies."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
from server_helpers import Conn, metrics, stream_text, wait_for_metric

from susurrus.audio.io import decode_audio
from susurrus.decoding.offline import transcribe_options
from susurrus.evaluation.metrics import corpus_error_rate

openai = pytest.importorskip("openai")

CLIP = "ljspeech_LJ001-0004"  # 5.1 s
LONG = "jfk_inaugural"  # 11 s
GERMAN = "picovoice_test_de"  # 5.3 s


def _client(server: Any, key: str = "any-key") -> Any:
    return openai.OpenAI(api_key=key, base_url=f"{server.http_url}/v1", max_retries=0)


@contextmanager
def _keep_torch_threads():
    """``susurrus transcribe --threads 1`` sets the process's torch threads: put them back after."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cli(*args: str) -> None:
    """``susurrus transcribe`` itself, with its default of one torch thread (as the server's workers)
    and greedy decoding (the REST default, ``rest.REST_BEAM_SIZE``)."""
    from susurrus.cli.main import main

    with _keep_torch_threads():
        assert main(["transcribe", *args, "--quiet", "--threads", "1", "--beam-size", "1"]) == 0


@pytest.mark.slow
def test_every_response_format_is_what_susurrus_transcribe_writes(server, dev_item, tmp_path):
    """json, text, srt, vtt and verbose_json through the SDK (two requests at a time, on the
    server's two workers) against the files ``susurrus transcribe -f all`` writes; the workers run
    one torch thread, as the command does by default."""
    item = dev_item(CLIP)
    _cli(str(item.audio), "-f", "all", "-o", str(tmp_path))
    written = {fmt: (tmp_path / f"{item.audio.stem}.{fmt}").read_text() for fmt in ("txt", "srt", "vtt", "json")}
    cli_json = json.loads(written["json"])
    client = _client(server)

    def ask(fmt: str) -> Any:
        with open(item.audio, "rb") as f:
            return client.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)

    with ThreadPoolExecutor(2) as pool:
        answers = dict(zip(("json", "text", "srt", "vtt", "verbose_json"),
                           pool.map(ask, ("json", "text", "srt", "vtt", "verbose_json"))))
    assert answers["json"].text == cli_json["text"] and cli_json["text"]
    assert answers["json"].usage.type == "duration" and answers["json"].usage.seconds == pytest.approx(5.139, abs=1e-3)
    assert answers["text"] == written["txt"]
    assert answers["srt"] == written["srt"]
    assert answers["vtt"] == written["vtt"]
    verbose = answers["verbose_json"]
    assert (verbose.language, verbose.duration, verbose.text) == ("english", cli_json["duration"], cli_json["text"])
    assert [(s.start, s.end, s.text.strip()) for s in verbose.segments] == [
        (s["start"], s["end"], s["text"]) for s in cli_json["segments"]]
    assert verbose.words is None  # words only when asked for
    assert corpus_error_rate([(item.text, cli_json["text"])]) <= 10.0


@pytest.mark.slow
def test_word_granularity_and_prompt_are_the_commands_options(server, dev_item, tmp_path):
    """``timestamp_granularities=["word", "segment"]`` is ``--word-timestamps``; ``prompt`` is
    ``--initial-prompt``; ``temperature`` 0 is the fallback ladder (the command's default)."""
    item = dev_item(CLIP)
    prompt = "Block books and printed books."
    _cli(str(item.audio), "-f", "json", "-o", str(tmp_path), "--word-timestamps", "--initial-prompt", prompt)
    cli_json = json.loads((tmp_path / f"{item.audio.stem}.json").read_text())
    with open(item.audio, "rb") as f:
        verbose = _client(server).audio.transcriptions.create(
            model="tiny.en", file=f, response_format="verbose_json", timestamp_granularities=["word", "segment"],
            prompt=prompt, temperature=0.0, language="en")
    assert verbose.text == cli_json["text"]
    words = [w for s in cli_json["segments"] for w in s["words"]]
    assert [(w.word, w.start, w.end) for w in verbose.words] == [(w["word"].strip(), w["start"], w["end"])
                                                                  for w in words]


@pytest.mark.slow
def test_stream_true_is_susurrus_stream_as_it_commits(server, tiny, dev_item):
    """``stream=True``: server-sent ``transcript.text.delta`` events as the streaming engine
    commits text, the first one long before the last, then ``transcript.text.done`` whose text is
    the deltas joined and what ``susurrus stream FILE`` prints."""
    item = dev_item(LONG)
    started = time.monotonic()
    arrivals, events = [], []
    with open(item.audio, "rb") as f:
        for event in _client(server).audio.transcriptions.create(model="gpt-4o-transcribe", file=f, stream=True):
            arrivals.append(time.monotonic() - started)
            events.append(event)
    deltas, done = events[:-1], events[-1]
    assert {e.type for e in deltas} == {"transcript.text.delta"} and done.type == "transcript.text.done"
    assert len(deltas) >= 5
    assert "".join(e.delta for e in deltas) == done.text == stream_text(tiny, decode_audio(item.audio))
    # the file is fed as fast as the engine goes: the first words come out while most of it is still to do
    assert arrivals[0] < 0.75 * arrivals[-1], arrivals


def test_models_lists_the_served_model_and_openais_names(server):
    client = _client(server)
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "tiny.en" and {"whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"} <= set(ids)
    assert client.models.retrieve("whisper-1").owned_by == "susurrus"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("whisper-large-v9")
    assert err.value.body["code"] == "model_not_found"


@pytest.fixture(scope="module")
def base_server(base):
    from susurrus.server.app import BackgroundServer

    with BackgroundServer(base, workers=0) as srv:  # threads of this process, on the shared base
        yield srv


@pytest.mark.slow
def test_translations_return_english_from_the_multilingual_model(base_server, base, dev_item):
    """German speech through ``audio.translations`` (``base``, served in this process's threads):
    English text, the same as ``model.transcribe(task="translate")`` with the command's options;
    verbose_json says the output language.

    The command's options decode with the fallback ladder: this item's one window fails at 0.0
    and settles at 0.2 (the server's segment says so). Each decode of the ladder starts its own
    seeded sampler, so the reference decodes that window at 0.2 alone: the same words as the whole
    ladder (checked: identical text), without the greedy decode the server already rejected."""
    item = dev_item(GERMAN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK marks translations deprecated
        with open(item.audio, "rb") as f:
            verbose = _client(base_server).audio.translations.create(model="whisper-1", file=f,
                                                                     response_format="verbose_json")
    settled = 0.2
    assert [s.temperature for s in verbose.segments] == [settled]  # the server ran the ladder past 0.0
    segments, _ = base.transcribe(str(item.audio), **transcribe_options(task="translate", beam_size=1,
                                                                        temperature=settled))
    expected = "".join(s.text for s in segments).strip()
    assert verbose.text == expected and verbose.language == "english"
    words = set(expected.lower().replace(",", " ").replace(".", " ").split())
    assert words & {"the", "was", "as", "this", "behind"} and not words & {"der", "die", "und", "wurde"}, expected


# ---------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def strict_server(tiny):
    """An API key, one session or request at a time, 600 KiB and 8 s of audio per upload."""
    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits
    from susurrus.server.rest.api import UploadLimits

    with BackgroundServer(tiny, limits=Limits(max_sessions=1), api_key="test-key", workers=0,
                          uploads=UploadLimits(max_bytes=600 * 1024, max_seconds=8.0)) as srv:
        yield srv


def _post(url: str, body: bytes, content_type: str, key: str = "test-key") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": content_type, "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    parts = [f'--xx\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    return ("".join(parts) + "--xx--\r\n").encode(), "multipart/form-data; boundary=xx"


def test_bad_requests_get_openais_error_bodies_and_the_server_goes_on(strict_server, dev_item, tmp_path):
    """Wrong key, no file, an empty file, not audio, over the size and the duration limits, an
    unknown response_format or model, a format that cannot stream: each a 4xx with
    ``{"error": {message, type, param, code}}``; then a normal request is answered."""
    url = f"{strict_server.http_url}/v1/audio/transcriptions"
    client = _client(strict_server, "test-key")
    clip = dev_item("ljspeech_LJ001-0002").audio  # 1.9 s
    long = dev_item(LONG).audio  # 11 s, 352 KB: under the size limit, over the duration limit

    def refused(kind: type, code: str, param: str | None, **request: Any) -> None:
        request.setdefault("model", "whisper-1")
        with pytest.raises(kind) as err:
            (request.pop("client", None) or client).audio.transcriptions.create(**request)
        body = err.value.body
        assert set(body) == {"message", "type", "param", "code"} and body["message"], body
        assert (body["code"], body["param"]) == (code, param), body

    refused(openai.AuthenticationError, "invalid_api_key", None, file=clip.read_bytes(),
            client=_client(strict_server, "wrong-key"))
    status, body = _post(url, *_multipart({"model": "whisper-1"}))
    assert status == 400 and body["error"]["code"] == "missing_required_parameter" and body["error"]["param"] == "file"
    status, body = _post(url, b'{"model": "whisper-1"}', "application/json")
    assert status == 400 and body["error"]["param"] == "file"
    refused(openai.BadRequestError, "empty_file", "file", file=("empty.wav", b""))
    refused(openai.BadRequestError, "invalid_file_format", "file", file=("notes.wav", b"not audio at all " * 64))
    refused(openai.BadRequestError, "audio_too_long", "file", file=long.read_bytes())
    big = tmp_path / "big.wav"
    sf.write(big, np.zeros(16000 * 25, np.float32), 16000, subtype="PCM_16")  # 800 KB
    refused(openai.APIStatusError, "file_too_large", "file", file=big.read_bytes())
    refused(openai.BadRequestError, "invalid_value", "response_format", file=clip.read_bytes(),
            response_format="mp3")
    refused(openai.NotFoundError, "model_not_found", "model", file=clip.read_bytes(), model="nope")
    refused(openai.BadRequestError, "invalid_value", "response_format", file=clip.read_bytes(),
            response_format="srt", stream=True)
    refused(openai.BadRequestError, "invalid_value", "language", file=clip.read_bytes(), language="de")
    refused(openai.BadRequestError, "invalid_value", "temperature", file=clip.read_bytes(), temperature=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(openai.BadRequestError) as err:  # tiny.en cannot translate
            client.audio.translations.create(model="whisper-1", file=clip.read_bytes())
    assert err.value.body["code"] == "unsupported_value"
    # the one slot is held by a WebSocket session: 429, then served once it closes
    with Conn(strict_server.url, additional_headers={"Authorization": "Bearer test-key"}) as c:
        c.until("session.created")
        refused(openai.RateLimitError, "session_limit_reached", None, file=clip.read_bytes())
    wait_for_metric(strict_server.http_url, "susurrus_sessions_open", lambda v: v == 0)
    answer = client.audio.transcriptions.create(model="whisper-1", file=clip.read_bytes())
    assert corpus_error_rate([(dev_item("ljspeech_LJ001-0002").text, answer.text)]) <= 20.0
    m = metrics(strict_server.http_url)
    assert m['susurrus_http_requests_total{endpoint="transcriptions",status="200"}'] == 1
    assert m['susurrus_http_requests_total{endpoint="transcriptions",status="413"}'] == 1
    assert m['susurrus_errors_total{type="invalid_request_error",code="invalid_file_format"}'] == 1
    assert m["susurrus_http_requests_open"] == 0 and m["susurrus_audio_seconds_total"] >= 1.9
