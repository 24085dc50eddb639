"""The realtime server with its streams in worker processes (``susurrus serve --workers N``): the
``server`` fixture runs two. Sessions at once land on different workers and give what
``model.stream()`` gives; closing a connection frees its streams there; a worker that dies fails
its session with a clear event and is restarted."""

from __future__ import annotations

import os
import signal
import time

import pytest
from server_helpers import Conn, metrics, pcm16_at, server_samples, stream_text, streamed, update_event, wait_for_metric

from susurrus.audio.io import decode_audio

# 2.6 and 3.3 s: the streams are open together from their first appends to their commits, however long
CLIPS = ("ljspeech_LJ001-0013", "librispeech_test-clean_1089-134686-0001")
COMPLETED = "conversation.item.input_audio_transcription.completed"


def _wait(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_two_sessions_at_once_run_on_two_worker_processes(server, tiny, dev_item):
    pool = server.state.workers
    assert pool is not None and len(pool) == 2
    _wait(lambda: pool.load() == [0, 0], "the streams of earlier tests to be freed")
    before = metrics(server.http_url)
    rates = (24000, 16000)
    pcms = [pcm16_at(decode_audio(dev_item(clip).audio), rate) for clip, rate in zip(CLIPS, rates)]
    conns = [Conn(server.url), Conn(server.url)]
    try:
        for c, pcm, rate in zip(conns, pcms, rates):
            c.until("session.created")
            c.send(update_event(rate=rate))
            c.append(pcm, rate // 10)
        # both streams are open (each is opened by its first append), one on each worker
        _wait(lambda: sum(pool.load()) == 2, "both streams to open")
        assert pool.load() == [1, 1]
        for c in conns:
            c.send({"type": "input_audio_buffer.commit"})
        transcripts = [c.until(COMPLETED)["transcript"] for c in conns]
        assert all(e["type"] != "error" for c in conns for e in c.events), [c.errors() for c in conns]
    finally:
        for c in conns:
            c.close()
    for transcript, pcm, rate in zip(transcripts, pcms, rates):
        assert transcript == stream_text(tiny, server_samples(pcm, rate))
    assert wait_for_metric(server.http_url, "susurrus_sessions_open", lambda v: v == 0) == 0
    _wait(lambda: pool.load() == [0, 0], "the closed sessions' streams to be freed")
    after = metrics(server.http_url)
    assert after["susurrus_workers"] == 2
    assert after["susurrus_compute_seconds_total"] > before["susurrus_compute_seconds_total"]
    audio_s = sum(len(pcm) / rate for pcm, rate in zip(pcms, rates))
    assert after["susurrus_audio_seconds_total"] - before["susurrus_audio_seconds_total"] > audio_s - 0.01
    # the engine steps the workers ran, counted from their replies: those of the same streams alone
    steps = sum(streamed(tiny, server_samples(pcm, rate)).steps for pcm, rate in zip(pcms, rates))
    assert steps > 0 and after["susurrus_steps_total"] - before["susurrus_steps_total"] == steps


@pytest.mark.slow
def test_a_worker_that_dies_fails_its_session_and_is_restarted(server, dev_item):
    pool = server.state.workers
    pcm = pcm16_at(decode_audio(dev_item(CLIPS[0]).audio), 16000)
    restarts = metrics(server.http_url)["susurrus_worker_restarts_total"]
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event(rate=16000))
        c.append(pcm[:16000], 1600)
        _wait(lambda: sum(pool.load()) == 1, "the stream to open")
        victim = next(w for w in pool.workers if w.sessions == 1)
        os.kill(victim.pid, signal.SIGKILL)
        c.append(pcm[16000:], 1600)
        failed = c.until("conversation.item.input_audio_transcription.failed")
        assert failed["error"]["code"] == "transcription_failed"
        assert "worker" in failed["error"]["message"] and "exited" in failed["error"]["message"]
    assert wait_for_metric(server.http_url, "susurrus_worker_restarts_total", lambda v: v > restarts) > restarts
    assert pool.workers[victim.slot] is not victim
    # the server goes on: a new session is transcribed (on either worker)
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event(rate=16000))
        c.append(pcm, 1600)
        c.send({"type": "input_audio_buffer.commit"})
        assert c.until(COMPLETED)["transcript"]
