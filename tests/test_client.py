"""``susurrus client`` against a real server on loopback: a file sent faster than the model
transcribes it arrives whole (the server holds the backlog), anything the server refuses (audio
past a small backlog bound, a message too large) makes the client fail loudly, and bad arguments
fail before connecting."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys

import pytest
from server_helpers import pcm16_at, server_samples, stream_text

from susurrus.audio.io import decode_audio
from susurrus.client import file_blocks, run_client

JFK = "jfk_inaugural"  # 11 s
KEY = "test-key"


def _run(url: str, pcm, rate: int = 24000, block_ms: int = 100, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = asyncio.run(run_client(url, file_blocks(pcm, rate, block_ms, realtime=False), rate, out=out, err=err,
                                    **kw))
    return status, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_a_file_sent_at_once_arrives_whole(server, tiny, dev_item):
    """11 s sent as fast as the socket takes them, the server's default backlog bound: the
    transcript is the whole file's."""
    pcm = pcm16_at(decode_audio(dev_item(JFK).audio), 24000)
    status, out, err = _run(server.url, pcm)
    assert status == 0, err
    assert err == ""
    assert out.strip() == stream_text(tiny, server_samples(pcm, 24000))
    assert out.strip().endswith("what you can do for your country.")


def test_audio_past_the_servers_backlog_bound_makes_the_client_fail_and_say_so(guarded_server, dev_item):
    """The guarded server holds 2 s of untranscribed audio at most: 11 s sent at once pass it;
    the refused appends are reported (``input_audio_backlog_full``) and the client exits 1."""
    pcm = pcm16_at(decode_audio(dev_item(JFK).audio), 24000)
    status, out, err = _run(guarded_server.url, pcm, api_key=KEY)
    assert status == 1
    assert "input_audio_backlog_full" in err and "the transcript may be incomplete" in err


def test_audio_the_server_refuses_makes_the_client_fail_and_say_so(guarded_server, dev_item):
    """The guarded server takes messages of 64 KiB at most: 2 s appends at 24 kHz (128 KB of
    base64) are refused, and the client reports it and exits 1 instead of printing nothing."""
    pcm = pcm16_at(decode_audio(dev_item(JFK).audio), 24000)[:24000 * 4]
    status, out, err = _run(guarded_server.url, pcm, block_ms=2000, api_key=KEY)
    assert status == 1
    assert "message_too_large" in err and "the transcript may be incomplete" in err
    assert out.strip() == ""


def test_client_arguments_fail_before_connecting_with_one_line(server, tmp_path):
    text = tmp_path / "text.wav"
    text.write_text("hello\n")
    good = str(text)
    http = server.url.replace("ws://", "http://")
    nothere = server.url.replace("/v1/realtime", "/v1/nothere")
    cases = [([http, good], "is an HTTP URL"),
             ([server.url, good], "text.wav"),
             ([nothere, str(tmp_path / "missing.wav")], "no such file")]
    for args, message in cases:
        out = subprocess.run([sys.executable, "-m", "susurrus", "client", *args], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2, out.stderr
        assert message in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow
def test_a_wrong_path_is_reported_as_the_servers_refusal(server, dev_item):
    nothere = server.url.replace("/v1/realtime", "/v1/nothere")
    clip = str(dev_item("ljspeech_LJ001-0008").audio)
    out = subprocess.run([sys.executable, "-m", "susurrus", "client", nothere, clip], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert "HTTP 403" in out.stderr and "/v1/realtime" in out.stderr and "Traceback" not in out.stderr
