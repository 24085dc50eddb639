"""Server limits and shutdown on a real server (uvicorn on loopback, tiny.en, real speech): a client
that stops reading is closed and freed, idle sessions close, the WebSocket ``Origin`` allow-list,
the API key on both transports, TLS, every accepted audio second accounted for in ``/metrics``,
and the drain on shutdown (in process with a short deadline; ``susurrus serve`` in a subprocess
with SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import soundfile as sf
from server_helpers import Conn, NeverReads, metrics, pcm16_at, update_event, wait_for_metric
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Opcode

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.server.access import key_matches, origin_allowed, parse_origins
from susurrus.server.metrics import DROP_REASONS

KEY = {"Authorization": "Bearer limits-key"}
COMPLETED = "conversation.item.input_audio_transcription.completed"
LONG = "librispeech_test-clean_1089-134686-0000"  # 10.4 s
SHORT = "ljspeech_LJ001-0008"  # 1.8 s
SHORT5 = "ljspeech_LJ001-0004"  # 5.1 s
APP = "https://app.example.com"


@pytest.fixture(scope="module")
def limited(tiny):
    """A server with small limits: 64 KiB of unread events, 2 s idle, an API key, one allowed
    origin besides its own; streams in its threads on the shared tiny.en."""
    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits

    limits = Limits(max_message_bytes=256 * 1024, max_buffered_s=30.0, max_sessions=4,
                    max_outbound_bytes=64 * 1024, idle_s=2.0)
    with BackgroundServer(tiny, limits=limits, api_key="limits-key", workers=0, allowed_origins=(APP,),
                          drain_s=5.0) as srv:
        yield srv


def _closed(c: Conn, timeout: float = 20) -> tuple[ConnectionClosed, list[dict]]:
    """Read until the server closes; the close and the events read before it."""
    seen = []
    deadline = time.monotonic() + timeout
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            seen.append(c.recv(timeout=max(0.1, deadline - time.monotonic())))
    return closed.value, seen


def _accounted(url: str) -> tuple[float, float, dict[str, float]]:
    m = metrics(url)
    dropped = {r: m.get(f'susurrus_audio_dropped_seconds_total{{reason="{r}"}}', 0.0) for r in DROP_REASONS}
    return m["susurrus_audio_accepted_seconds_total"], m["susurrus_audio_seconds_total"], dropped


def _wait_accounted(url: str, timeout: float = 60) -> tuple[float, float, dict[str, float]]:
    """Once no work is left, accepted = transcribed + dropped (each metric is rounded to 1 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        accepted, transcribed, dropped = _accounted(url)
        if abs(accepted - transcribed - sum(dropped.values())) <= 0.01 or time.monotonic() > deadline:
            return accepted, transcribed, dropped
        time.sleep(0.1)


def test_a_client_that_never_reads_is_closed_and_its_session_freed(limited):
    """The client asks for events (a session.update is answered with ~0.5 KB) and reads none: once
    64 KiB wait beyond the sockets' buffers the session is closed, its queue freed and the gauge
    back to 0, while the client still has not read; reading then, it finds the events sent before,
    the error ``client_too_slow`` and close 1008 with its reason."""
    url = limited.http_url
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0) == 0
    c = NeverReads(limited, KEY)
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 1) == 1
    update = json.dumps(update_event(susurrus={"latency": "high"}))
    sent = 0
    with contextlib.suppress(OSError):  # the server may cut the connection while the client still sends
        while limited.state.connections and sent < 200_000:  # ~1 MB of answers fill the sockets and the queue
            c.send(update)
            sent += 1
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0) == 0
    assert not limited.state.connections
    frames = c.read_all()
    assert c.protocol.close_rcvd is not None and c.protocol.close_rcvd.code == 1008
    assert "too slow" in c.protocol.close_rcvd.reason
    texts = [json.loads(f.data) for f in frames if f.opcode is Opcode.TEXT]
    assert texts[0]["type"] == "session.created" and texts[1]["type"] == "session.updated"
    assert texts[-1]["type"] == "error" and texts[-1]["error"]["code"] == "client_too_slow"
    assert len(texts) < sent  # the events queued beyond the limit were freed, not sent
    assert metrics(url)['susurrus_errors_total{type="server_error",code="client_too_slow"}'] >= 1
    with Conn(limited.url, additional_headers=KEY) as again:  # the server serves on
        assert again.recv()["type"] == "session.created"


def test_an_idle_session_is_closed(limited):
    with Conn(limited.url, additional_headers=KEY) as c:
        assert c.recv()["type"] == "session.created"
        t0 = time.monotonic()
        closed, seen = _closed(c)
    assert 1.5 <= time.monotonic() - t0 <= 10
    assert [e["error"]["code"] for e in seen if e["type"] == "error"] == ["idle_timeout"]
    assert closed.rcvd is not None and closed.rcvd.code == 1000 and closed.rcvd.reason == "idle timeout"
    assert wait_for_metric(limited.http_url, "susurrus_sessions_open", lambda v: v == 0) == 0


def test_the_websocket_origin_is_checked(limited):
    own = f"http://{limited.host}:{limited.port}"
    for origin in (APP, own, None):  # allowed, the server's own page, a client without Origin
        with Conn(limited.url, additional_headers=KEY, origin=origin) as c:
            assert c.recv()["type"] == "session.created"
    for origin in ("https://evil.example.com", "null", f"https://{limited.host}:{limited.port}"):
        with pytest.raises(InvalidStatus) as refused:
            Conn(limited.url, additional_headers=KEY, origin=origin)
        assert refused.value.response.status_code == 403
    assert metrics(limited.http_url)['susurrus_sessions_refused_total{reason="origin_not_allowed"}'] >= 3
    # the rules themselves
    assert parse_origins("https://A.example.com, http://b:8080 ,*") == ("https://a.example.com:443",
                                                                        "http://b:8080", "*")
    with pytest.raises(ValueError):
        parse_origins("https://a.example.com/path")
    assert origin_allowed({"origin": "http://x:1", "host": "y"}, "ws", ("*",))
    assert origin_allowed({"origin": "https://demo.local", "host": "demo.local"}, "wss", None)
    assert not origin_allowed({"origin": "http://demo.local", "host": "demo.local"}, "wss", None)


def test_a_wrong_key_is_refused_on_both_transports(limited):
    assert key_matches("limits-key", "limits-key") and not key_matches("limits-kez", "limits-key")
    assert not key_matches(None, "limits-key") and not key_matches("", "limits-key")
    with Conn(limited.url, additional_headers={"Authorization": "Bearer limits-kez"}) as c:
        assert c.recv()["error"]["code"] == "invalid_api_key"
        closed, _ = _closed(c)
        assert closed.rcvd is not None and closed.rcvd.code == 1008
    for headers, status in (({"Authorization": "Bearer limits-kez"}, 401), ({}, 401), (KEY, 200)):
        request = urllib.request.Request(f"{limited.http_url}/v1/models", headers=headers)
        try:
            got = urllib.request.urlopen(request, timeout=10).status
        except urllib.error.HTTPError as err:
            got = err.code
            assert json.loads(err.read())["error"]["code"] == "invalid_api_key"
        assert got == status


@pytest.mark.slow
def test_every_accepted_audio_second_is_transcribed_or_dropped_with_a_reason(limited, dev_item):
    """A completed item, a client that leaves with 10 s queued, a clear: in /metrics, accepted =
    transcribed + dropped, the dropped audio under its reason."""
    url = limited.http_url
    before = _wait_accounted(url)
    short = pcm16_at(decode_audio(dev_item(SHORT).audio), 24000)
    long = pcm16_at(decode_audio(dev_item(LONG).audio), 24000)
    with Conn(limited.url, additional_headers=KEY) as c:
        c.until("session.created")
        c.append(long, 2400, "x")
        c.send({"type": "input_audio_buffer.clear"})
        c.until("input_audio_buffer.cleared")
        c.append(short, 2400)
        c.send({"type": "input_audio_buffer.commit"})
        assert c.until(COMPLETED)["transcript"]
    gone = Conn(limited.url, additional_headers=KEY)
    gone.until("session.created")
    gone.append(long, 2400)
    gone.ws.close()  # with most of it queued
    assert wait_for_metric(url, "susurrus_sessions_open", lambda v: v == 0) == 0
    accepted, transcribed, dropped = _wait_accounted(url)
    sent = (2 * len(long) + len(short)) / 24000
    assert accepted - before[0] == pytest.approx(sent, abs=0.01)
    assert accepted == pytest.approx(transcribed + sum(dropped.values()), abs=0.01)
    assert dropped["client_gone"] - before[2]["client_gone"] > 0
    assert transcribed - before[1] >= len(short) / 24000 - 0.01


def test_shutdown_past_the_drain_deadline_says_what_was_not_transcribed(tiny, dev_item):
    """In process, a drain of 0.5 s: a client that committed 10 s of audio, all of it still queued,
    gets an error saying how much was not transcribed and close 1012; the rest is counted as
    dropped ``drain_deadline``."""
    from susurrus.server.app import BackgroundServer

    pcm = pcm16_at(decode_audio(dev_item(LONG).audio), 16000)
    srv = BackgroundServer(tiny, workers=0, drain_s=0.5).start()
    try:
        with Conn(srv.url) as c:
            c.until("session.created")
            c.send(update_event(rate=16000))
            c.append(pcm, 1600)
            c.send({"type": "input_audio_buffer.commit"})
            c.until("input_audio_buffer.committed")
            stopping = threading.Thread(target=srv.stop)
            stopping.start()
            closed, seen = _closed(c)
            stopping.join(timeout=30)
    finally:
        srv.stop()
    assert closed.rcvd is not None and closed.rcvd.code == 1012 and closed.rcvd.reason == "server shutting down"
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["server_shutting_down"] and "not transcribed" in errors[0]["message"]
    assert not any(e["type"] == COMPLETED for e in seen)
    m = srv.state.metrics
    deadline = time.monotonic() + 30
    while abs(m.audio_accepted_seconds - m.audio_seconds - m.audio_dropped_seconds) > 0.01:
        assert time.monotonic() < deadline, "the running work did not finish"
        time.sleep(0.05)
    assert m.audio_accepted_seconds == pytest.approx(len(pcm) / 16000, abs=0.01)
    assert m.audio_dropped["drain_deadline"] > 1.0


@pytest.mark.slow
def test_sigterm_drains_the_server_the_committed_item_completes_before_the_close(dev_item, tmp_path):
    """``susurrus serve`` in a subprocess: a client streams a recording (faster than the model),
    commits, and the server gets SIGTERM at once: new sessions are refused (1012), /healthz says
    draining, the client still gets the completed transcript, then close 1012; the server's last
    log line accounts for all accepted audio."""
    item = dev_item(SHORT5)
    audio = decode_audio(item.audio)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(__import__("pathlib").Path(__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "susurrus", "serve", "--model", "tiny.en", "--port", str(port),
                                 "--workers", "0", "--threads", "1", "--drain-s", "60", "--max-buffered-s", "60"],
                                stderr=err, stdout=subprocess.DEVNULL, env=env)
    try:
        http, url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/realtime"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                urllib.request.urlopen(f"{http}/healthz", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        with Conn(url) as c:
            c.until("session.created")
            c.send(update_event(rate=16000))
            c.append(pcm16_at(audio, 16000), 1600)
            c.send({"type": "input_audio_buffer.commit"})
            c.until("input_audio_buffer.committed")
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)  # uvicorn looks at its exit flag every 0.1 s
            with Conn(url) as late:
                assert late.recv()["error"]["code"] == "server_shutting_down"
                closed, _ = _closed(late)
                assert closed.rcvd is not None and closed.rcvd.code == 1012
            with pytest.raises(urllib.error.HTTPError) as health:
                urllib.request.urlopen(f"{http}/healthz", timeout=5)
            assert health.value.code == 503 and json.loads(health.value.read())["status"] == "draining"
            done = c.until(COMPLETED, timeout=120)
            closed, seen = _closed(c, timeout=30)
        assert corpus_error_rate([(item.text, done["transcript"])]) <= 20.0  # the whole recording's words
        assert closed.rcvd is not None and closed.rcvd.code == 1012
        assert not [e for e in c.events if e["type"] == "error"]
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    found = re.search(r"audio accepted ([\d.]+) s, transcribed ([\d.]+) s, dropped ([\d.]+) s", text)
    assert found, text
    accepted, transcribed, dropped = map(float, found.groups())
    assert accepted == pytest.approx(len(audio) / 16000, abs=0.01)
    assert transcribed == pytest.approx(accepted, abs=0.01) and dropped == 0.0


def test_tls(tiny, tmp_path):
    """``--ssl-keyfile`` / ``--ssl-certfile``: https and wss with a self-signed certificate."""
    from susurrus.server.app import BackgroundServer

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                           str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                           "subjectAltName=IP:127.0.0.1"], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {made.stderr.decode()[-200:]}")
    context = ssl.create_default_context(cafile=str(cert))
    with BackgroundServer(tiny, workers=0, ssl_keyfile=str(key), ssl_certfile=str(cert)) as srv:
        assert srv.url.startswith("wss://")
        health = json.loads(urllib.request.urlopen(f"{srv.http_url}/healthz", timeout=10, context=context).read())
        assert health["status"] == "ok"
        with Conn(srv.url, ssl=context) as c:
            assert c.recv()["type"] == "session.created"


def test_websocket_compression_only_when_asked(tiny, dev_item):
    """The client offers permessage-deflate (the websockets library does by default); the server
    takes it only with ``ws_compression`` (``susurrus serve --ws-compression``), and a compressed
    session still transcribes."""
    from susurrus.server.app import BackgroundServer

    for compression in (False, True):
        with BackgroundServer(tiny, workers=0, ws_compression=compression) as srv, Conn(srv.url) as c:
            agreed = c.ws.response.headers.get("Sec-WebSocket-Extensions") or ""
            assert ("permessage-deflate" in agreed) == compression, agreed
            assert c.recv()["type"] == "session.created"
            c.send(update_event())
            c.append(pcm16_at(decode_audio(dev_item(SHORT).audio), 24000), 2400)
            c.send({"type": "input_audio_buffer.commit"})
            done = c.until(COMPLETED)
            assert corpus_error_rate([(dev_item(SHORT).text, done["transcript"])]) < 30, done["transcript"]


@pytest.mark.slow
def test_new_sessions_are_refused_while_the_model_is_behind_real_time(tiny, dev_item, tmp_path):
    """Two long uploads take both of the server's model threads; a session's 1.5 s of audio
    (sent at real-time pace: within 2 s of its clock) then waits behind them, so the model is
    behind real time: /healthz says overloaded, /metrics shows the backlog, and a new session is
    refused with server_overloaded and close 1013 while the open one goes on. Once the model has
    caught up, sessions are accepted again and the open session's audio was all transcribed."""
    import openai

    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits

    # the first 28 s of a 44 s recording: one whole 30 s window of offline decoding each, seconds
    # of a model thread (the rest would be a second window: more of the same wait)
    upload = tmp_path / "two_cities_28s.wav"
    sf.write(upload, decode_audio(dev_item("asset_two_cities").audio)[: 28 * 16000], 16000, subtype="PCM_16")
    audio = decode_audio(dev_item(SHORT5).audio)[: int(1.5 * 16000)]
    with BackgroundServer(tiny, limits=Limits(overload_lag_s=0.5, max_sessions=8), workers=0) as srv:
        client = openai.OpenAI(api_key="k", base_url=f"{srv.http_url}/v1", max_retries=0)

        def transcribe() -> None:
            with open(upload, "rb") as f:
                client.audio.transcriptions.create(model="whisper-1", file=f)

        jobs = [threading.Thread(target=transcribe) for _ in range(2)]
        for job in jobs:
            job.start()
        wait_for_metric(srv.http_url, "susurrus_http_requests_open", lambda v: v >= 2)
        with Conn(srv.url) as a:
            a.until("session.created")
            a.send(update_event())
            a.until("session.updated")
            a.append(pcm16_at(audio, 24000), len(audio) * 3 // 2)
            wait_for_metric(srv.http_url, 'susurrus_backlog_seconds{quantile="0.5"}', lambda v: v >= 1.0)
            health = json.loads(urllib.request.urlopen(f"{srv.http_url}/healthz").read())
            assert health["status"] == "overloaded" and health["backlog_s"] >= 1.0
            assert metrics(srv.http_url)["susurrus_overloaded"] == 1
            with Conn(srv.url) as b:
                closed, seen = _closed(b)
            assert closed.rcvd.code == 1013
            assert [e["error"]["code"] for e in seen if e["type"] == "error"] == ["server_overloaded"]
            for job in jobs:
                job.join(timeout=120)
            a.send({"type": "input_audio_buffer.commit"})
            done = a.until(COMPLETED)
            assert len(done["transcript"].split()) >= 2
        wait_for_metric(srv.http_url, "susurrus_overloaded", lambda v: v == 0)
        with Conn(srv.url) as c:
            assert c.recv()["type"] == "session.created"
        m = metrics(srv.http_url)
        assert m['susurrus_sessions_refused_total{reason="server_overloaded"}'] == 1


def test_audio_queued_for_a_busy_model_is_accounted_when_the_client_goes(tiny, dev_item):
    """The model threads are busy (two long calls hold both), a client appends audio and goes
    away while its first append still waits for a thread: once the threads are free, that audio
    is counted (dropped ``client_gone`` or transcribed), never lost from the balance. (A waiting
    call used to be cancelled with its connection, its audio counted nowhere: ~0.1 s per abrupt
    disconnect in the soak.)"""
    from susurrus.server.app import BackgroundServer

    pcm = pcm16_at(decode_audio(dev_item(SHORT).audio), 16000)
    srv = BackgroundServer(tiny, workers=0).start()
    release = threading.Event()
    try:
        m = srv.state.metrics
        holds = [srv.state.pool.submit(release.wait, 60) for _ in range(srv.state.pool._max_workers)]
        with Conn(srv.url) as c:
            c.until("session.created")
            c.send(update_event(rate=16000))
            c.append(pcm, 1600)
            deadline = time.monotonic() + 30
            while m.audio_accepted_seconds < len(pcm) / 16000 - 0.01:
                assert time.monotonic() < deadline, "the server did not accept the appends"
                time.sleep(0.02)
        deadline = time.monotonic() + 30
        while m.sessions_open:
            assert time.monotonic() < deadline, "the session did not end"
            time.sleep(0.02)
        release.set()
        for h in holds:
            h.result(timeout=30)
        deadline = time.monotonic() + 30
        while abs(m.audio_accepted_seconds - m.audio_seconds - m.audio_dropped_seconds) > 0.005:
            assert time.monotonic() < deadline, (
                f"accepted {m.audio_accepted_seconds:.3f} s != transcribed {m.audio_seconds:.3f} s "
                f"+ dropped {m.audio_dropped}")
            time.sleep(0.05)
        assert m.audio_accepted_seconds == pytest.approx(len(pcm) / 16000, abs=0.01)
        assert m.audio_dropped.get("client_gone", 0.0) > 0
    finally:
        release.set()
        srv.stop()
