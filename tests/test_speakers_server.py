"""Speaker labels through the server: REST ``response_format=diarized_json`` parsed by the OpenAI
Python SDK (and ``speaker`` on verbose_json), known speakers as OpenAI takes them, a bad
reference clip; a realtime session with ``susurrus.diarize`` streaming JFK then another voice."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile as sf
from server_helpers import Conn, pcm16_at, update_event

from susurrus.audio.io import decode_audio

pytest.importorskip("resemblyzer.hparams", reason="speaker labels need resemblyzer (pip install susurrus[speakers])")
openai = pytest.importorskip("openai")

JFK, OTHER = "jfk_inaugural", "librispeech_test-clean_1089-134686-0000"


@pytest.fixture(scope="module")
def two_voices(dev_item):
    a, b = decode_audio(dev_item(JFK).audio), decode_audio(dev_item(OTHER).audio)[: 6 * 16000]  # 11 s, 6 s
    return np.concatenate([a, np.zeros(8000, np.float32), b]), len(a) / 16000


def _wav(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.mark.slow
def test_rest_diarized_json_parses_with_the_openai_sdk(server, two_voices, dev_item):
    audio, change = two_voices
    client = openai.OpenAI(api_key="k", base_url=f"{server.http_url}/v1", max_retries=0)
    ref = decode_audio(dev_item("librispeech_test-clean_1089-134691-0001").audio)  # the reader, another sentence
    out = client.audio.transcriptions.create(
        model="gpt-4o-transcribe-diarize", file=("two.wav", _wav(audio)), response_format="diarized_json",
        known_speaker_names=["Reader"],
        known_speaker_references=["data:audio/wav;base64," + base64.b64encode(_wav(ref)).decode()])
    assert type(out).__name__ == "TranscriptionDiarized"
    assert out.segments and all(s.type == "transcript.text.segment" for s in out.segments)
    early = {s.speaker for s in out.segments if s.end < change - 0.5}
    late = {s.speaker for s in out.segments if s.start > change + 0.5}
    assert early == {"S1"} and late == {"Reader"}
    verbose = client.audio.transcriptions.create(model="whisper-1", file=("two.wav", _wav(audio)),
                                                 response_format="verbose_json", timestamp_granularities=["word"],
                                                 extra_body={"diarize": "true"})
    plain = client.audio.transcriptions.create(model="whisper-1", file=("two.wav", _wav(audio)),
                                               response_format="verbose_json", timestamp_granularities=["word"])
    assert [w.word for w in verbose.words] == [w.word for w in plain.words]  # labels only add
    assert {w.speaker for w in verbose.words} == {"S1", "S2"}
    assert {s.speaker for s in verbose.segments} == {"S1", "S2"}


def test_rest_bad_reference_clip_is_a_400_naming_it(server, two_voices):
    audio, _ = two_voices
    client = openai.OpenAI(api_key="k", base_url=f"{server.http_url}/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="'Ann'.*silence"):
        client.audio.transcriptions.create(
            model="whisper-1", file=("two.wav", _wav(audio[:32000])), response_format="diarized_json",
            known_speaker_names=["Ann"],
            known_speaker_references=["data:audio/wav;base64," + base64.b64encode(_wav(np.zeros(48000))).decode()])


@pytest.mark.slow
def test_realtime_session_labels_both_speakers(server, two_voices):
    audio, change = two_voices
    pcm = pcm16_at(audio, 16000)
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event(16000, susurrus={"diarize": True}))
        updated = c.until("session.updated")
        assert updated["session"]["susurrus"]["diarize"] is True
        c.append(pcm, 1600)
        c.send({"type": "input_audio_buffer.commit"})
        c.until("conversation.item.input_audio_transcription.completed")
    words = [w for e in c.events if e["type"] == "susurrus.words" for w in e["words"]]
    assert {w["speaker"] for w in words if w["end"] < change - 0.5} == {"S1"}
    assert {w["speaker"] for w in words if w["start"] > change + 2.5} == {"S2"}  # as in test_speakers
    changes = [e for e in c.events if e["type"] == "susurrus.speaker"]
    assert [e["speaker"] for e in changes] == ["S1", "S2"]
