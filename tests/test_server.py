"""The realtime server with real clients: the official OpenAI SDK, a raw WebSocket client, the
``susurrus client`` command; a real uvicorn server on loopback, real weights, real speech."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np
import pytest
from server_helpers import (
    SDK_WEBSOCKET_OPTIONS,
    Conn,
    metrics,
    pcm16_at,
    server_samples,
    stream_text,
    streamed,
    update_event,
)

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.session import PRESETS

CLIP = "ljspeech_LJ001-0004"  # 5.1 s


def _sdk_client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(api_key="any-key", base_url=f"{server.http_url}/v1",
                         websocket_base_url=f"ws://{server.host}:{server.port}/v1", max_retries=0)


@pytest.mark.slow
@pytest.mark.parametrize("rate", [24000, 16000])
def test_openai_sdk_streams_a_recording_and_gets_what_susurrus_stream_gives(server, tiny, dev_item, rate, tmp_path):
    """The official SDK's realtime client (GA transcription session, client commits): deltas
    while the audio streams, then the whole transcript, equal to ``susurrus stream`` on the
    samples the server transcribes (at 16 kHz: the file itself)."""
    item = dev_item(CLIP)
    audio = decode_audio(item.audio)
    pcm = pcm16_at(audio, rate)
    client = _sdk_client(server)
    events = []
    with client.realtime.connect(extra_query={"intent": "transcription"},
                                 websocket_connection_options=SDK_WEBSOCKET_OPTIONS) as conn:
        conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None,
                                "transcription": {"model": "gpt-4o-transcribe", "language": "en"}}},
        })
        block = rate // 10
        for i in range(0, len(pcm), block):
            conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + block].tobytes()).decode())
        conn.input_audio_buffer.commit()
        for event in conn:
            events.append(event)
            if event.type in ("conversation.item.input_audio_transcription.completed", "error"):
                break
    types = [e.type for e in events]
    assert types[0] == "session.created" and "session.updated" in types
    assert "error" not in types, [e for e in events if e.type == "error"]
    updated = next(e for e in events if e.type == "session.updated")
    assert updated.session.audio.input.format.rate == rate
    committed = next(e for e in events if e.type == "input_audio_buffer.committed")
    deltas = [e for e in events if e.type == "conversation.item.input_audio_transcription.delta"]
    completed = events[-1]
    assert completed.type == "conversation.item.input_audio_transcription.completed"
    assert len(deltas) >= 3  # committed text streams out in pieces, not only at the end
    assert {d.item_id for d in deltas} == {committed.item_id} == {completed.item_id}
    assert "".join(d.delta for d in deltas) == completed.transcript
    assert completed.transcript == stream_text(tiny, server_samples(pcm, rate))
    direct = stream_text(tiny, audio)  # `susurrus stream FILE` on the 16 kHz recording
    if rate == 16000:
        assert completed.transcript == direct
        # and the command itself, once
        from susurrus.cli.main import main

        assert main(["stream", str(item.audio), "--quiet", "-f", "json", "-o", str(tmp_path)]) == 0
        assert completed.transcript == json.loads((tmp_path / f"{item.audio.stem}.json").read_text())["text"]
    else:  # 16 -> 24 -> 16 kHz is not the identity; the words must still agree
        assert corpus_error_rate([(direct, completed.transcript)]) <= 5.0
    assert corpus_error_rate([(item.text, completed.transcript)]) <= 20.0


def test_beta_transcription_session_and_extension_events(server, tiny, dev_item):
    """The beta shape (``transcription_session.update`` with ``input_audio_format: pcm16``)
    gets ``transcription_session.updated``; the extension events carry the interim guess and
    committed words with times; two items in one session, each with its own transcript."""
    audio = decode_audio(dev_item("ljspeech_LJ001-0008").audio)
    pcm = pcm16_at(audio, 24000)
    with Conn(server.url, additional_headers={"OpenAI-Beta": "realtime=v1"}) as c:
        assert c.recv()["type"] == "transcription_session.created"
        c.send({"type": "transcription_session.update",
                "session": {"input_audio_format": "pcm16", "turn_detection": None,
                            "input_audio_transcription": {"model": "whisper-1", "language": "en"},
                            "susurrus": {"latency": "low"}}})
        updated = c.until("transcription_session.updated")
        assert updated["session"]["input_audio_format"] == "pcm16"
        assert updated["session"]["susurrus"]["latency"] == "low"
        transcripts = []
        for _ in range(2):
            c.append(pcm, 2400)
            c.send({"type": "input_audio_buffer.commit"})
            transcripts.append(c.until("conversation.item.input_audio_transcription.completed"))
    expected = stream_text(tiny, server_samples(pcm, 24000), latency="low")
    assert [t["transcript"] for t in transcripts] == [expected, expected]
    committed = [e for e in c.events if e["type"] == "input_audio_buffer.committed"]
    assert committed[0]["previous_item_id"] is None
    assert committed[1]["previous_item_id"] == committed[0]["item_id"] != committed[1]["item_id"]
    words = [w for e in c.events if e["type"] == "susurrus.words" and e["item_id"] == committed[0]["item_id"]
             for w in e["words"]]
    assert "".join(w["word"] for w in words).strip() == expected
    duration = len(audio) / 16000
    assert all(0 <= w["start"] <= w["end"] <= duration + 0.05 and w["emitted_at"] >= w["end"] - 0.05
               for w in words)
    assert any(e["type"] == "susurrus.interim" and e["text"] for e in c.events)


@pytest.mark.slow
def test_a_client_with_a_short_ping_deadline_gets_a_long_recording_sent_at_once(server, tiny, dev_item):
    """websockets' keepalive with a 2 s pong deadline (a ping every second), 11 s of speech
    (JFK: seconds of model work on one thread, so several pings fall inside it) sent as
    fast as the socket takes it, at the server's default backlog bound: the server reads every
    message as it comes, so each ping is answered while the model works through the backlog; no
    disconnect, and the transcript is the whole recording's."""
    pcm = pcm16_at(decode_audio(dev_item("jfk_inaugural").audio), 24000)
    with Conn(server.url, ping_interval=1, ping_timeout=2) as c:
        c.until("session.created")
        c.send(update_event())
        c.append(pcm, 2400)
        c.send({"type": "input_audio_buffer.commit"})
        done = c.until("conversation.item.input_audio_transcription.completed", timeout=600)
    assert not c.errors()
    assert done["transcript"] == stream_text(tiny, server_samples(pcm, 24000))


def test_latency_preset_and_openai_delay_map_onto_stream_settings(server):
    with Conn(server.url) as c:
        created = c.until("session.created")["session"]
        # OpenAI's default for a transcription session: server VAD (tests/test_server_turns.py runs it)
        assert created["audio"]["input"]["turn_detection"] == {"type": "server_vad", "threshold": 0.5,
                                                               "prefix_padding_ms": 300, "silence_duration_ms": 500}
        assert created["susurrus"]["latency"] == "medium"
        c.send(update_event(audio={"input": {"transcription": {"model": "gpt-realtime-whisper", "delay": "minimal"}}}))
        s = c.until("session.updated")["session"]
        assert s["susurrus"]["latency"] == "low" and s["susurrus"]["chunk_ms"] == PRESETS["low"].chunk_ms
        c.send(update_event(susurrus={"latency": "high", "lookahead_ms": 700}))
        s = c.until("session.updated")["session"]
        ext = s["susurrus"]
        assert (ext["latency"], ext["lookahead_ms"], ext["chunk_ms"]) == ("high", 700, PRESETS["high"].chunk_ms)
        # server_vad is reported with OpenAI's defaults filled in (tests/test_server_turns.py runs it)
        c.send(update_event(audio={"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}}))
        s = c.until("session.updated")["session"]
        assert s["audio"]["input"]["turn_detection"] == {"type": "server_vad", "threshold": 0.5,
                                                         "prefix_padding_ms": 300, "silence_duration_ms": 400}
        assert not any(e["type"] == "susurrus.warning" for e in c.events)


def test_healthz_and_metrics(server, tiny, dev_item):
    before = metrics(server.http_url)
    audio = decode_audio(dev_item("ljspeech_LJ001-0008").audio)
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event(rate=16000))
        c.append(pcm16_at(audio, 16000), 1600)
        c.send({"type": "input_audio_buffer.commit"})
        c.until("conversation.item.input_audio_transcription.completed")
    after = metrics(server.http_url)
    assert after["susurrus_audio_seconds_total"] - before["susurrus_audio_seconds_total"] == pytest.approx(
        len(audio) / 16000, abs=0.01)
    assert after["susurrus_compute_seconds_total"] > before["susurrus_compute_seconds_total"]
    # the engine steps of the item: those of the same audio streamed alone
    assert after["susurrus_steps_total"] - before["susurrus_steps_total"] == streamed(tiny, audio).steps > 0
    assert after["susurrus_word_latency_seconds_count"] > before["susurrus_word_latency_seconds_count"]
    assert after['susurrus_word_latency_seconds_bucket{le="+Inf"}'] == after["susurrus_word_latency_seconds_count"]
    assert after["susurrus_sessions_total"] >= before["susurrus_sessions_total"] + 1
    import urllib.request

    health = json.loads(urllib.request.urlopen(f"{server.http_url}/healthz", timeout=10).read())
    assert health["status"] == "ok" and health["model"] == "tiny.en"
    page = urllib.request.urlopen(f"{server.http_url}/", timeout=10).read().decode()
    assert "app.js" in page and "Start microphone" in page


@pytest.mark.slow
def test_susurrus_client_command_prints_the_transcript(server, tiny, dev_item):
    item = dev_item("ljspeech_LJ001-0008")
    out = subprocess.run([sys.executable, "-m", "susurrus", "client", server.url, str(item.audio), "--rate", "16000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == stream_text(tiny, decode_audio(item.audio))


def test_server_resamples_streamed_chunks_like_the_whole_signal():
    """The server's streaming resampler: any chunking gives offline ``resample`` of the whole,
    and the same samples bit for bit whatever the chunking (a session's text must not depend on
    how its client cut the audio)."""
    from susurrus.audio.io import resample
    from susurrus.audio.resampler import StreamResampler

    rng = np.random.default_rng(1)
    x = rng.standard_normal(50_001).astype(np.float32) * 0.3
    for rate in (24000, 48000, 44100, 8000, 16000):
        runs = []
        for largest in (4000, 300):
            r = StreamResampler(rate, 16000)
            pieces, i = [], 0
            while i < len(x):
                n = int(rng.integers(1, largest))
                pieces.append(r.process(x[i:i + n]))
                i += n
            pieces.append(r.flush())
            runs.append(np.concatenate(pieces))
        got, want = runs[0], resample(x, rate, 16000)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 1e-5
        assert np.array_equal(runs[0], runs[1])
