"""Voice-agent frameworks against a real server on loopback: the OpenAI Agents SDK's speech-to-text
(its streamed session over the Realtime WebSocket with ``server_vad`` and ``semantic_vad``, fed
at once and at real time, and its non-streamed ``transcribe`` over REST) and LiveKit Agents'
OpenAI STT plugin (realtime transcription and ``recognize``), headless: no LiveKit server or room.

The server's turns are those of ``model.stream(turns=...)`` on the samples it receives, however
fast they come, so every streamed test compares the turns exactly with that reference."""

from __future__ import annotations

import asyncio
import base64
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
import torch
from server_helpers import pcm16_at

from susurrus.audio.resampler import StreamResampler
from susurrus.decoding.offline import transcribe_options
from susurrus.evaluation import signals
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.server.realtime.settings import SessionSettings, parse_turn_detection
from susurrus.streaming.session import TurnEnded

JFK = "jfk_inaugural"  # 11 s, four phrases
SHORT = ("ljspeech_LJ001-0002", "ljspeech_LJ001-0008")  # 1.9 s and 1.8 s: two turns, real time
LIVEKIT_TURNS = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 600, "silence_duration_ms": 350}


def reference_turns(model: Any, pcm24: np.ndarray, turn_detection: dict[str, Any], *, commit: bool) -> list[str]:
    """The turns the server gives for 24 kHz ``pcm24`` with ``turn_detection``: the same stream
    settings, the same resampler, whole ``chunk_ms`` blocks; ``commit``: the client commits at
    the end (the rest is fed and the stream finished, ending the open turn)."""
    cfg = SessionSettings(turn_detection=parse_turn_detection(turn_detection, "turn_detection")).stream_config()
    stream = model.stream(**{f.name: getattr(cfg, f.name) for f in fields(cfg)})
    samples = StreamResampler(24000, 16000).process(pcm24.astype(np.float32) / 32768.0)
    block = cfg.chunk_ms * 16
    end = len(samples) if commit else len(samples) - len(samples) % block
    events = [e for i in range(0, end, block) for e in stream.feed(samples[i:min(i + block, end)])]
    if commit:
        events += stream.finish()
    return [e.text for e in events if isinstance(e, TurnEnded)]


@contextmanager
def _one_torch_thread():
    """The server's workers run one torch thread (offline results are compared with theirs)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def jfk(dev_item) -> np.ndarray:
    from susurrus.audio.io import decode_audio

    return pcm16_at(decode_audio(dev_item(JFK).audio), 24000)


@pytest.fixture(scope="module")
def two_turns(dev_item) -> tuple[np.ndarray, list[str]]:
    """Two short utterances, 1 s of silence between them and after: 24 kHz PCM16 and their texts."""
    from susurrus.audio.io import decode_audio

    items = [dev_item(i) for i in SHORT]
    audio = np.concatenate([decode_audio(items[0].audio), signals.silence(1.0), decode_audio(items[1].audio),
                            signals.silence(1.0)])
    return pcm16_at(audio, 24000), [i.text for i in items]


# ---------------------------------------------------------------------------- OpenAI Agents SDK

def _agents() -> Any:
    return pytest.importorskip("agents.voice", reason="openai-agents[voice] is not installed")


def _agents_turns(server: Any, pcm24: np.ndarray, turn_detection: dict[str, Any], realtime: bool) -> list[str]:
    """``OpenAISTTModel(...).create_session(...)``, ``transcribe_turns()``: audio in 100 ms
    blocks, at once or paced at real time, then the end of input (the SDK commits, then clears)."""
    from openai import AsyncOpenAI

    agents_voice = _agents()

    async def run() -> list[str]:
        client = AsyncOpenAI(api_key="any-key", base_url=f"{server.http_url}/v1", max_retries=0)
        model = agents_voice.OpenAISTTModel("gpt-4o-transcribe", client)
        audio = agents_voice.StreamedAudioInput()
        session = await model.create_session(audio, agents_voice.STTModelSettings(turn_detection=turn_detection),
                                             trace_include_sensitive_data=False,
                                             trace_include_sensitive_audio_data=False)

        async def feed() -> None:
            for i in range(0, len(pcm24), 2400):
                await audio.add_audio(pcm24[i:i + 2400])
                if realtime:
                    await asyncio.sleep(0.1)
            await audio.add_audio(None)  # the end of input: the SDK commits, then clears

        feeding = asyncio.create_task(feed())
        turns = [turn async for turn in session.transcribe_turns()]
        await feeding
        return turns

    return asyncio.run(asyncio.wait_for(run(), 300))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
def test_agents_sdk_streamed_session_fed_at_once(server, tiny, dev_item, jfk, kind):
    """The whole recording as fast as the socket takes it: every turn arrives, the last one
    (ended by the SDK's commit, followed at once by a clear) included."""
    turns = _agents_turns(server, jfk, {"type": kind}, realtime=False)
    assert turns == reference_turns(tiny, jfk, {"type": kind}, commit=True)
    assert len(turns) >= 3
    assert corpus_error_rate([(dev_item(JFK).text, " ".join(turns))]) <= 20.0, turns


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
def test_agents_sdk_streamed_session_at_real_time(server, tiny, two_turns, kind):
    pcm, texts = two_turns
    turns = _agents_turns(server, pcm, {"type": kind}, realtime=True)
    assert turns == reference_turns(tiny, pcm, {"type": kind}, commit=True)
    assert len(turns) == 2
    assert corpus_error_rate(list(zip(texts, turns))) <= 15.0, turns


@pytest.mark.slow
def test_agents_sdk_transcribe_is_the_offline_transcription(server, tiny, two_turns):
    """``OpenAISTTModel.transcribe`` (REST, a WAV it writes at 24 kHz): the text
    ``susurrus transcribe`` gives for that file."""
    from openai import AsyncOpenAI

    agents_voice = _agents()
    pcm, texts = two_turns
    audio = agents_voice.AudioInput(buffer=pcm, frame_rate=24000)
    client = AsyncOpenAI(api_key="any-key", base_url=f"{server.http_url}/v1", max_retries=0)
    model = agents_voice.OpenAISTTModel("gpt-4o-transcribe", client)
    text = asyncio.run(model.transcribe(audio, agents_voice.STTModelSettings(language="en"), False, False))
    _, wav, _ = audio.to_audio_file()
    with _one_torch_thread():
        segments, _ = tiny.transcribe(wav.getvalue(), **transcribe_options(language="en", beam_size=1))
    assert text == "".join(s.text for s in segments).strip()
    assert corpus_error_rate([(" ".join(texts), text)]) <= 15.0


# ---------------------------------------------------------------------------- OpenAI SDK, the default

@pytest.mark.slow
def test_openai_sdk_session_relying_on_the_default_turn_detection(server, tiny, jfk):
    """The OpenAI SDK's realtime client, as a framework that never sets ``turn_detection`` uses
    it: the server runs OpenAI's default (server VAD) and every turn is committed and completed
    with no commit from the client: the reference turns of ``server_vad`` with its defaults."""
    openai = pytest.importorskip("openai")
    from server_helpers import SDK_WEBSOCKET_OPTIONS

    pcm = np.concatenate([jfk, np.zeros(24000, np.int16)])  # 1 s of silence ends the last turn
    expected = reference_turns(tiny, pcm, {"type": "server_vad"}, commit=False)

    async def run() -> tuple[Any, list[str]]:
        client = openai.AsyncOpenAI(api_key="any-key", base_url=f"{server.http_url}/v1",
                                    websocket_base_url=f"ws://{server.host}:{server.port}/v1", max_retries=0)
        async with client.realtime.connect(extra_query={"intent": "transcription"},
                                           websocket_connection_options=SDK_WEBSOCKET_OPTIONS) as conn:
            await conn.session.update(session={"type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"model": "gpt-4o-transcribe", "language": "en"}}}})
            for i in range(0, len(pcm), 2400):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 2400].tobytes()).decode())
            updated, finals = None, []
            async for event in conn:
                assert event.type != "error", event
                if event.type == "session.updated":
                    updated = event.session.audio.input.turn_detection
                elif event.type == "conversation.item.input_audio_transcription.completed":
                    finals.append(event.transcript)
                    if len(finals) == len(expected):
                        break
            return updated, finals

    td, finals = asyncio.run(asyncio.wait_for(run(), 300))
    assert (td.type, td.threshold, td.prefix_padding_ms, td.silence_duration_ms) == ("server_vad", 0.5, 300, 500)
    assert finals == expected and len(finals) >= 3


# ---------------------------------------------------------------------------- LiveKit Agents


@pytest.mark.slow
def test_livekit_openai_plugin_realtime_and_recognize(server, tiny, jfk, two_turns):
    """LiveKit's ``openai.STT(use_realtime=True)`` stream, headless (``http_context.open()``
    stands in for a job's HTTP session; frames are pushed by hand): its server_vad defaults
    (600 ms padding, 350 ms silence), the file and 1 s of silence at once; one final transcript
    per turn, as the reference. Then ``recognize`` (the REST path, ``whisper-1``: verbose_json) on
    a short recording: the offline text."""
    lk_openai = pytest.importorskip("livekit.plugins.openai", reason="livekit-plugins-openai is not installed")
    from livekit import rtc
    from livekit.agents import stt
    from livekit.agents.utils import http_context

    pcm = np.concatenate([jfk, np.zeros(24000, np.int16)])
    short = two_turns[0]
    expected = reference_turns(tiny, pcm, LIVEKIT_TURNS, commit=False)

    async def run() -> tuple[list[str], str]:
        async with http_context.open():
            live = lk_openai.STT(base_url=f"{server.http_url}/v1", api_key="any-key", model="gpt-4o-transcribe",
                                 use_realtime=True, language="en")
            stream = live.stream()
            for i in range(0, len(pcm), 2400):
                chunk = pcm[i:i + 2400]
                stream.push_frame(rtc.AudioFrame(chunk.tobytes(), 24000, 1, len(chunk)))
            stream.end_input()
            finals: list[str] = []
            async for event in stream:  # the plugin never commits: turns end on the server's VAD
                if event.type == stt.SpeechEventType.FINAL_TRANSCRIPT:
                    finals.append(event.alternatives[0].text)
                    if len(finals) == len(expected):
                        break
            await stream.aclose()
            await live.aclose()
            rest = lk_openai.STT(base_url=f"{server.http_url}/v1", api_key="any-key", model="whisper-1",
                                 language="en")
            recognized = await rest.recognize(buffer=[rtc.AudioFrame(short.tobytes(), 24000, 1, len(short))])
            await rest.aclose()
            return finals, recognized.alternatives[0].text

    finals, text = asyncio.run(asyncio.wait_for(run(), 300))
    assert finals == expected and len(finals) >= 3
    wav = rtc.combine_audio_frames([rtc.AudioFrame(short.tobytes(), 24000, 1, len(short))]).to_wav_bytes()
    with _one_torch_thread():
        segments, _ = tiny.transcribe(wav, **transcribe_options(language="en", beam_size=1))
    assert text == "".join(s.text for s in segments).strip()
