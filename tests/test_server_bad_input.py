"""Bad input and limits on a real server: each case gets a clear ``error`` event, the session
goes on where that makes sense (a commit after the error transcribes all accepted audio), and
the server still serves a new session afterwards."""

from __future__ import annotations

import json

import numpy as np
import pytest
from server_helpers import Conn, metrics, pcm16_at, server_samples, stream_text, update_event, wait_for_metric
from websockets.exceptions import ConnectionClosed

from susurrus.audio.io import decode_audio
from susurrus.client import append_event

SHORT = "ljspeech_LJ001-0008"  # 1.8 s: "has never been surpassed."
COMPLETED = "conversation.item.input_audio_transcription.completed"
KEY = {"Authorization": "Bearer test-key"}


@pytest.fixture(scope="module")
def short(dev_item, tiny):
    """The short clip as 24 kHz PCM16 and the transcript of exactly those samples."""
    pcm = pcm16_at(decode_audio(dev_item(SHORT).audio), 24000)
    return pcm, stream_text(tiny, server_samples(pcm, 24000))


def serves_a_new_session(srv, headers=None) -> None:
    """A fresh connection gets session.created and transcribes a little audio to completion."""
    with Conn(srv.url, additional_headers=headers) as c:
        assert c.recv()["type"] == "session.created"
        c.send(update_event())  # the client commits
        rng = np.random.default_rng(0)
        c.append((rng.standard_normal(4800) * 300).astype(np.int16), 2400, "n")
        c.send({"type": "input_audio_buffer.commit"})
        assert c.until(COMPLETED)["type"] == COMPLETED
        assert not c.errors()


def error_after(c: Conn, message, code: str) -> dict:
    c.send(message)
    err = c.until("error")["error"]
    assert err["code"] == code, err
    assert err["type"] and err["message"]
    return err


def continues_and_transcribes(c: Conn, short, accepted_before: np.ndarray | None = None, tiny=None) -> None:
    """After an error: the same session still transcribes (all audio accepted, before and after)."""
    pcm, expected = short
    c.append(pcm, 2400, "ok")
    c.send({"type": "input_audio_buffer.commit"})
    done = c.until(COMPLETED)
    if accepted_before is not None:
        expected = stream_text(tiny, server_samples(np.concatenate([accepted_before, pcm]), 24000))
    assert done["transcript"] == expected


def test_malformed_json(server, short):
    with Conn(server.url) as c:
        c.until("session.created")
        err = error_after(c, '{"type": "input_audio_buffer.append", "audio": ', "invalid_json")
        assert "JSON" in err["message"]
        error_after(c, "[1, 2, 3]", "invalid_json")
        error_after(c, '{"no_type": 1}', "missing_required_parameter")
        continues_and_transcribes(c, short)
    serves_a_new_session(server)


def test_unknown_and_unsupported_event_types(server, short):
    with Conn(server.url) as c:
        c.until("session.created")
        err = error_after(c, {"type": "input_audio_buffer.explode", "event_id": "evt_1"}, "unknown_event_type")
        assert err["event_id"] == "evt_1" and err["param"] == "type"
        error_after(c, {"type": "response.create"}, "unsupported_event")
        continues_and_transcribes(c, short)
    serves_a_new_session(server)


def test_bad_base64_keeps_the_audio_accepted_before_it(server, short, tiny):
    pcm, _ = short
    with Conn(server.url) as c:
        c.until("session.created")
        c.append(pcm, 2400, "first")  # accepted
        err = error_after(c, {"type": "input_audio_buffer.append", "audio": "not base64 at all!", "event_id": "b"},
                          "invalid_audio")
        assert err["event_id"] == "b" and "base64" in err["message"]
        continues_and_transcribes(c, short, accepted_before=pcm, tiny=tiny)
    serves_a_new_session(server)


def test_odd_byte_count(server, short, tiny):
    pcm, _ = short
    with Conn(server.url) as c:
        c.until("session.created")
        c.append(pcm, 2400, "first")
        import base64

        err = error_after(c, {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()},
                          "invalid_audio")
        assert "odd" in err["message"]
        continues_and_transcribes(c, short, accepted_before=pcm, tiny=tiny)
    serves_a_new_session(server)


def test_wrong_sample_rate_is_refused_and_the_session_keeps_its_settings(server, short):
    with Conn(server.url) as c:
        c.until("session.created")
        err = error_after(c, update_event(rate=12345), "unsupported_sample_rate")
        assert err["param"] == "session.audio.input.format.rate" and "24000" in err["message"]
        error_after(c, {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcmu"}}}}}, "unsupported_audio_format")
        error_after(c, {"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}},
                    "unsupported_audio_format")
        error_after(c, {"type": "session.update", "session": {"type": "realtime"}}, "invalid_value")
        assert not any(e["type"] == "session.updated" for e in c.events)  # nothing was applied
        continues_and_transcribes(c, short)  # still 24 kHz
    serves_a_new_session(server)


@pytest.mark.slow
def test_changing_the_rate_with_buffered_audio_is_refused(server, short, tiny):
    pcm, _ = short
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event())  # the client commits: what it sent before the refused change is one item
        c.append(pcm, 2400, "first")
        error_after(c, update_event(rate=16000), "format_change_with_buffered_audio")
        continues_and_transcribes(c, short, accepted_before=pcm, tiny=tiny)
    serves_a_new_session(server)


def test_audio_before_session_update_is_accepted_with_the_defaults(server, short):
    """As OpenAI does: no session.update needed; the defaults are 24 kHz PCM16 and server_vad (a
    commit ends the open turn)."""
    with Conn(server.url) as c:
        created = c.until("session.created")["session"]
        assert created["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        continues_and_transcribes(c, short)
        assert not c.errors()


def test_commit_with_no_audio(server, short):
    with Conn(server.url) as c:
        c.until("session.created")
        error_after(c, {"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty")
        c.append(short[0], 2400)
        c.send({"type": "input_audio_buffer.clear"})
        c.until("input_audio_buffer.cleared")
        error_after(c, {"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty")  # cleared
        continues_and_transcribes(c, short)  # the cleared audio is not in this item
    serves_a_new_session(server)


def test_oversized_message(server, short):
    limit = server.state.limits.max_message_bytes
    with Conn(server.url) as c:
        c.until("session.created")
        big = np.zeros(limit, np.int16)  # 2 bytes a sample, base64: ~2.7x the limit
        err = error_after(c, append_event(big), "message_too_large")
        assert str(limit) in err["message"]
        error_after(c, b"\x00\x01binary", "binary_frame_not_supported")
        continues_and_transcribes(c, short)
    serves_a_new_session(server)


def test_a_burst_past_the_backlog_bound_is_refused_with_an_error_and_the_session_goes_on(guarded_server, short):
    """2 s of untranscribed audio at most: a burst of ~3.6 s sent at once is read as it comes
    (pings are answered meanwhile); the appends past the bound are refused with
    ``input_audio_backlog_full``, said once per run of refusals, naming the first refused append;
    what was accepted is transcribed, and the session goes on."""
    pcm, _ = short
    burst = np.concatenate([pcm, pcm])
    with Conn(guarded_server.url, additional_headers=KEY) as c:
        c.until("session.created")
        c.send(update_event())
        ids = c.append(burst, 2400, "burst")
        c.send({"type": "input_audio_buffer.commit"})
        done = c.until(COMPLETED)
        errors = c.errors()
        assert errors and {e["code"] for e in errors} == {"input_audio_backlog_full"}, errors
        first = ids.index(errors[0]["event_id"])
        assert first >= 20  # 2 s (20 appends of 0.1 s) were taken before the first refusal
        assert "--max-buffered-s" in errors[0]["message"] and "real-time pace" in errors[0]["message"]
        assert done["transcript"]
        c.events.clear()
        continues_and_transcribes(c, short)
        assert not c.errors()
    serves_a_new_session(guarded_server, KEY)


def test_missing_or_bad_api_key_is_refused(guarded_server):
    for headers, subprotocols in ((None, None), ({"Authorization": "Bearer wrong"}, None),
                                  (None, ["realtime", "openai-insecure-api-key.wrong"])):
        with Conn(guarded_server.url, additional_headers=headers, subprotocols=subprotocols) as c:
            err = c.recv()["error"]
            assert err["code"] == "invalid_api_key" and err["type"] == "authentication_error"
            with pytest.raises(ConnectionClosed) as closed:
                c.recv()
            assert closed.value.rcvd.code == 1008
    # the key as a bearer header (SDKs) or as a subprotocol (browsers)
    serves_a_new_session(guarded_server, KEY)
    with Conn(guarded_server.url, subprotocols=["realtime", "openai-insecure-api-key.test-key"]) as c:
        assert c.ws.subprotocol == "realtime"
        assert c.recv()["type"] == "session.created"
    assert metrics(guarded_server.http_url)['susurrus_sessions_refused_total{reason="invalid_api_key"}'] >= 3


def test_too_many_sessions_are_refused_until_one_closes(guarded_server):
    url = guarded_server.http_url
    wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0)
    first, second = Conn(guarded_server.url, additional_headers=KEY), Conn(guarded_server.url, additional_headers=KEY)
    try:
        assert first.recv()["type"] == second.recv()["type"] == "session.created"
        with Conn(guarded_server.url, additional_headers=KEY) as third:
            err = third.recv()["error"]
            assert err["code"] == "session_limit_reached" and "2" in err["message"]
            with pytest.raises(ConnectionClosed) as closed:
                third.recv()
            assert closed.value.rcvd.code == 1013
    finally:
        first.close()
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v <= 1) <= 1
    serves_a_new_session(guarded_server, KEY)
    second.close()


def test_a_client_that_disconnects_mid_stream_frees_its_session_at_once(server, dev_item):
    """10 s of audio sent in a burst, then the socket closes: the session is gone from the
    open-sessions gauge and its queued audio is dropped, not transcribed for nobody."""
    url = server.http_url
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0) == 0
    before = metrics(url)
    pcm = pcm16_at(decode_audio(dev_item("librispeech_test-clean_1089-134686-0000").audio), 24000)  # 10.4 s
    c = Conn(server.url)
    c.until("session.created")
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 1) == 1
    c.append(pcm, 2400)
    c.ws.close()  # no commit: the client vanished
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0) == 0
    after = metrics(url)
    dropped = (after['susurrus_audio_dropped_seconds_total{reason="client_gone"}']
               - before['susurrus_audio_dropped_seconds_total{reason="client_gone"}'])
    processed = after["susurrus_audio_seconds_total"] - before["susurrus_audio_seconds_total"]
    assert dropped > 0  # its queued work was dropped at the disconnect, not left to run
    assert processed + dropped <= len(pcm) / 24000 + 0.5
    serves_a_new_session(server)


def test_errors_are_counted_by_type_in_metrics(server):
    before = metrics(server.http_url).get('susurrus_errors_total{type="invalid_request_error",code="invalid_json"}', 0)
    with Conn(server.url) as c:
        c.until("session.created")
        error_after(c, "{", "invalid_json")
    after = metrics(server.http_url)['susurrus_errors_total{type="invalid_request_error",code="invalid_json"}']
    assert after == before + 1
    json.dumps(after)
