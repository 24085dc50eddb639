"""``susurrus serve-ray``: the Ray Serve deployment on a local one-node Ray (tiny.en, real speech).

Skips when Ray Serve is not installed (the optional extra ``susurrus[ray]``, which CI does not
install). One replica behind Serve's HTTP proxy: a recording streamed over the Realtime WebSocket
comes back as ``susurrus stream`` gives it, the handshake names the replica, the REST API and
``/healthz`` answer through the proxy. The 2-node cluster, killing a replica and scale-down are
measured by ``benchmarks/ray_cluster.py``."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import urllib.request
import uuid

import pytest
from server_helpers import Conn, pcm16_at, server_samples, stream_text, update_event

from susurrus.audio.io import decode_audio

NO_RAY = ("Ray Serve is not installed (the optional extra `pip install 'susurrus[ray]'`; CI does not install it)")

CLIP = "ljspeech_LJ001-0004"  # 5.1 s
COMPLETED = "conversation.item.input_audio_transcription.completed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_app():
    """A local Ray (1 CPU, no dashboard), Serve's proxy on a free port, one replica."""
    serve = pytest.importorskip("ray.serve", reason=NO_RAY)
    import ray

    from susurrus.server.ray_serve import APP_NAME, ReplicaOptions, ScaleOptions, build_app

    port = _free_port()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, namespace="susurrus-test")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(ReplicaOptions(drain_s=5.0, scale_down_grace_s=2.0), ScaleOptions(num_replicas=1)),
                  name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_serve_ray_without_ray_says_how_to_install_it():
    """Without the extra (simulated: ``ray`` unimportable) the command fails in one line."""
    code = ("import sys; sys.modules['ray'] = None; from susurrus.cli.main import main; "
            "sys.exit(main(['serve-ray']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pip install 'susurrus[ray]'" in out.stderr


def test_a_recording_streamed_through_ray_serve_comes_back_as_susurrus_stream_gives_it(ray_app, tiny, dev_item):
    item = dev_item(CLIP)
    pcm = pcm16_at(decode_audio(item.audio), 24000)
    with Conn(ray_app.replace("http", "ws") + "/v1/realtime") as c:
        replica = c.ws.response.headers.get("x-susurrus-replica")
        c.send(update_event(24000))
        c.append(pcm, 2400)
        c.send({"type": "input_audio_buffer.commit"})
        completed = c.until(COMPLETED, timeout=60)
        assert not c.errors()
        deltas = [e["delta"] for e in c.events if e["type"] == "conversation.item.input_audio_transcription.delta"]
    assert replica  # the handshake says which replica holds the session
    assert completed["transcript"] == "".join(deltas) == stream_text(tiny, server_samples(pcm, 24000))

    health = urllib.request.urlopen(f"{ray_app}/healthz", timeout=10)
    body = json.loads(health.read())
    assert health.status == 200 and body["status"] == "ok" and body["model"] == "tiny.en"
    from susurrus.server.ray_serve import DEFAULT_SESSIONS_PER_REPLICA

    assert body["max_sessions"] == DEFAULT_SESSIONS_PER_REPLICA  # the replica's capacity, not Serve's default
    assert health.headers["x-susurrus-replica"] == replica  # one replica

    # the REST API through the proxy: the same model, the offline transcription
    boundary = uuid.uuid4().hex
    wav = item.audio.read_bytes()
    form = io.BytesIO()
    form.write(f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'.encode())
    form.write(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
               f'Content-Type: audio/wav\r\n\r\n'.encode() + wav + f"\r\n--{boundary}--\r\n".encode())
    request = urllib.request.Request(f"{ray_app}/v1/audio/transcriptions", data=form.getvalue(),
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    text = json.loads(urllib.request.urlopen(request, timeout=60).read())["text"]
    offline, _ = tiny.transcribe(str(item.audio), beam_size=1)  # the REST default (rest.REST_BEAM_SIZE)
    assert text == "".join(s.text for s in offline).strip()
