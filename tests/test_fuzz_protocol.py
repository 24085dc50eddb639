"""Fuzzing the realtime protocol and the REST upload (``tests/protocol_fuzz.py``) with a small,
deterministic budget: most cases on the protocol layer itself (``RealtimeSession``, the form and
upload checks), a few with the real model in-process, a few on the real server on loopback; then
a normal session must still transcribe a real recording. ``benchmarks/fuzz_protocol.py`` runs the
same with a large budget. The bugs the fuzzer found have a regression test each, at the end."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from protocol_fuzz import (
    Step,
    check_error,
    form_cases,
    protocol_cases,
    run_form,
    run_protocol,
    run_rest,
    run_server,
    run_transcribed,
    run_upload,
    speech_cases,
    transcribed_cases,
    upload_bytes,
    wav_bytes,
)
from server_helpers import Conn, metrics, pcm16_at, server_samples, stream_text, words

from susurrus.audio.io import decode_audio
from susurrus.client import session_update
from susurrus.server.realtime.settings import Limits
from susurrus.server.realtime.transcriber import _stream_kwargs
from susurrus.server.rest.jobs import UploadLimits

SMALL = Limits(max_message_bytes=64 * 1024, max_buffered_s=2.0)
SPEECH = "ljspeech_LJ001-0008"  # 1.8 s: "has never been surpassed."
FINAL = "ljspeech_LJ001-0002"  # 1.9 s: "in being comparatively modern."


def budget(n: int, shrink: bool = True):
    """A small deterministic budget; ``shrink=False`` where one example costs seconds (a failure
    is then reported as found, not minimised)."""
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    phases=list(Phase) if shrink else [Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@budget(150)
@given(steps=protocol_cases(SMALL.max_message_bytes))
def test_protocol_layer_answers_every_event_and_refusals_change_nothing(steps):
    result = run_protocol(steps, SMALL)
    assert result.ok, result.problems()


@budget(20)
@given(steps=transcribed_cases(SMALL.max_message_bytes))
def test_the_models_side_completes_every_commit_with_all_its_audio(tiny, steps):
    result = run_transcribed(steps, tiny, SMALL)
    assert result.ok, result.problems()


@pytest.fixture(scope="module")
def speech(dev_item):
    audio = decode_audio(dev_item(SPEECH).audio)
    return {rate: pcm16_at(audio, rate) for rate in (16000, 24000)}


@pytest.fixture(scope="module")
def expected(tiny, speech):
    """The transcript of the speech as the server streams it, per rate and stream settings."""
    cache: dict = {}

    def text(rate, config) -> str:
        key = (rate, config)
        if key not in cache:
            stream = tiny.stream(**_stream_kwargs(config))
            samples = server_samples(speech[rate], rate)
            block = config.chunk_ms * 16
            for i in range(0, len(samples), block):
                stream.feed(samples[i:i + block])
            stream.finish()
            cache[key] = stream.text.strip()
        return cache[key]
    return text


@budget(2, shrink=False)
@given(steps=speech_cases(256 * 1024, pieces=3))
def test_server_answers_in_time_keeps_speech_around_bad_events_and_frees_sessions(server, speech, expected, steps):
    result = run_server(steps, server, speech, expected)
    assert result.ok, result.problems()


@budget(150)
@given(fields=form_cases())
def test_rest_form_is_accepted_or_refused_with_openais_errors(tiny, fields):
    result = run_form(fields, tiny)
    assert result.ok, result.problems()


@budget(150)
@given(data=upload_bytes())
def test_rest_upload_decodes_to_finite_audio_or_is_refused(data):
    result = run_upload(data, UploadLimits(max_seconds=30))
    assert result.ok, result.problems()


@budget(3, shrink=False)
@given(fields=form_cases(), data=upload_bytes())
def test_rest_endpoint_answers_200_or_a_4xx(server, fields, data):
    result = run_rest(fields, data, server.http_url)
    assert result.ok, result.problems()


def test_after_the_fuzz_a_normal_session_transcribes_a_real_recording(server, tiny, dev_item):
    """Runs after the fuzz above (same server): nothing it did leaves a trace."""
    item = dev_item(FINAL)
    pcm = pcm16_at(decode_audio(item.audio), 24000)
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(session_update(24000))
        c.until("session.updated")
        c.append(pcm, 2400)
        c.send({"type": "input_audio_buffer.commit"})
        done = c.until("conversation.item.input_audio_transcription.completed")
        assert not c.errors()
    assert done["transcript"] == stream_text(tiny, server_samples(pcm, 24000))
    assert words(done["transcript"]) == words(item.text)
    assert metrics(server.http_url)["susurrus_sessions_open"] in (0, 1)  # this one may still be closing


# ---------------------------------------------------------------------------- what the fuzzer found


@pytest.mark.parametrize("text", [
    '{"type": "input_audio_buffer.commit", "x": ' + "9" * 4301 + "}",  # Python's int digit limit: ValueError
    '{"type": "input_audio_buffer.append", "audio": ' + "1" * 10_000 + "}",
])
def test_a_number_too_long_to_convert_is_invalid_json_not_a_dead_session(text):
    """Found by the fuzzer: ``json.loads`` raises ``ValueError`` (not ``JSONDecodeError``) for an
    integer of more than 4300 digits; it escaped ``receive`` and ended the connection."""
    from susurrus.server.metrics import Metrics
    from susurrus.server.realtime.session import RealtimeSession

    s = RealtimeSession(model_name="tiny.en", multilingual=False, limits=SMALL, metrics=Metrics())
    events, works = s.receive(text)
    assert [e["error"]["code"] for e in events] == ["invalid_json"] and not works
    result = run_protocol([Step("text", text, "regression")], SMALL)
    assert result.ok, result.problems()


@pytest.mark.parametrize("session", [
    {"turn_detection": {"type": "semantic_vad", "eagerness": ["high"]}},
    {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": {"a": 1}}}}},
    {"input_audio_transcription": {"delay": ["low"]}},
    {"audio": {"input": {"transcription": {"delay": {}}}}},
])
def test_an_unhashable_enum_value_is_invalid_value(session):
    """Found by the fuzzer: ``eagerness`` and ``delay`` were looked up in dicts, so a list or an
    object raised ``TypeError`` out of ``receive`` and ended the connection."""
    from susurrus.server.metrics import Metrics
    from susurrus.server.realtime.session import RealtimeSession

    s = RealtimeSession(model_name="tiny.en", multilingual=False, limits=SMALL, metrics=Metrics())
    events, _ = s.receive(json.dumps({"type": "session.update", "event_id": "u1", "session": session}))
    assert len(events) == 1 and events[0]["error"]["code"] == "invalid_value"
    assert not check_error(events[0], "u1", {"invalid_value"})
    assert events[0]["error"]["param"].endswith(("eagerness", "delay"))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_so_every_server_event_is_strict_json(number):
    """Found by the fuzzer: a ``turn_detection`` field the server keeps as given
    (``idle_timeout_ms``) set to ``NaN`` came back in ``session.updated`` as ``NaN``, which is
    not JSON (a browser's ``JSON.parse`` throws). Numbers must be finite, as RFC 8259 says."""
    text = ('{"type": "session.update", "session": {"type": "transcription", "audio": {"input": {'
            f'"turn_detection": {{"type": "server_vad", "idle_timeout_ms": {number}}}}}}}}}')
    result = run_protocol([Step("text", text, "regression")], SMALL)
    assert result.ok, result.problems()
    assert dict(result.errors) == {"invalid_json": 1}


def test_an_upload_with_nan_or_absurd_samples_is_refused_at_once():
    """Found by the fuzzer: a float WAV holding one NaN (or Inf, or 1e30) decoded to samples the
    model reads as NaN logits; the offline job ran the temperature ladder over them (about four
    minutes of a worker on tiny.en for a NaN) and failed with a 500. Now a 400
    ``invalid_file_format`` before any work; hot but real audio (2x full scale) still decodes."""
    x = (np.random.default_rng(0).standard_normal(16000) * 0.05).astype("<f4")
    x[200] = 2.0
    assert run_upload(wav_bytes(x, bits=32, fmt=3), UploadLimits()).ok
    for bad in (math.nan, math.inf, -1e30):
        x[100] = bad
        result = run_upload(wav_bytes(x, bits=32, fmt=3), UploadLimits())
        assert result.ok, result.problems()
        assert dict(result.errors) == {"invalid_file_format": 1}


def test_a_commit_with_an_extra_big_integer_is_a_commit_and_speech_cases_leave_it_out():
    """The large fuzz's 'speech came back cut' (3 of 39,854 cases): a frame the generator meant
    as bad JSON, ``{"type": "input_audio_buffer.commit", "x": 99…9}`` (20 digits), is a valid
    commit; between the speech's pieces it split the item, and the fuzzer expected the whole
    transcript of the part after it. The server was right; such frames stay out of the speech."""
    from protocol_fuzz import ProtocolChecker, _changes_item

    frame = '{"type": "input_audio_buffer.commit", "x": ' + "9" * 20 + "}"
    checker = ProtocolChecker(SMALL, np.full(4800, 1000, np.int16))
    checker.play(Step("text", json.dumps(session_update(24000)), "real"))
    checker.play(Step("speech", 4800, "speech"))
    events, works, _ = checker.play(Step("text", frame, "text.big_int"))
    assert [e["type"] for e in events] == ["input_audio_buffer.committed"] and works, events
    assert _changes_item(Step("text", frame, "text.big_int"), SMALL.max_message_bytes)
    bad = '{"type": "input_audio_buffer.commit", "x": ' + "9" * 4301 + "}"  # past Python's int limit: not JSON
    assert not _changes_item(Step("text", bad, "text.big_int"), SMALL.max_message_bytes)


def test_items_after_a_commit_are_counted_from_zero(tiny):
    """The large fuzz's 'item counts 4378 samples, its appends 4531' (2 cases: append, commit,
    turn detection switched on, append): the checker kept each item's appended samples under
    ``id(item)``; the committed item, freed, gave its id to the turn stream that came next, which
    then seemed to own the old item's samples. Short items and turn streams in a row."""
    def append(n: int) -> Step:
        pcm = np.random.default_rng(n).normal(0, 3000, n).astype(np.int16)
        return Step("text", json.dumps({"type": "input_audio_buffer.append",
                                        "audio": base64.b64encode(pcm.tobytes()).decode()}),
                    "input_audio_buffer.append")

    commit = Step("text", json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer.commit")
    steps = [Step("text", json.dumps(session_update(24000)), "session.update")]
    for n in (153, 77, 2400):
        steps += [append(n), commit,
                  Step("text", json.dumps({"type": "transcription_session.update", "session": {
                      "turn_detection": {"type": "semantic_vad"}}}), "transcription_session.update"),
                  append(4378),
                  Step("text", json.dumps(session_update(24000)), "session.update")]
    result = run_transcribed(steps, tiny, SMALL)
    assert result.ok, result.problems()
