"""The realtime protocol without a socket: ``RealtimeSession`` decisions and the turn seam."""

from __future__ import annotations

import json

import numpy as np
import pytest

from susurrus.client import append_event
from susurrus.server.metrics import Metrics
from susurrus.server.realtime.items import TurnSignal
from susurrus.server.realtime.session import RealtimeSession
from susurrus.server.realtime.settings import Limits, SessionSettings, apply_update
from susurrus.server.realtime.transcriber import Transcriber


def _session(**limits) -> RealtimeSession:
    return RealtimeSession(model_name="tiny.en", multilingual=False, limits=Limits(**limits), metrics=Metrics())


def _send(session: RealtimeSession, event) -> tuple[list, list]:
    return session.receive(json.dumps(event))


@pytest.mark.parametrize("delay,preset", [("minimal", "low"), ("low", "low"), ("medium", "medium"),
                                          ("high", "high"), ("xhigh", "high")])
def test_openai_delay_maps_onto_presets_and_the_extension_wins(delay, preset):
    t = {"transcription": {"delay": delay}}
    s = apply_update(SessionSettings(), {"type": "session.update", "session": {"audio": {"input": t}}},
                     multilingual=False, buffered_audio=False)
    assert s.latency == preset
    s = apply_update(SessionSettings(), {"type": "session.update", "session": {"audio": {"input": t},
                                                                               "susurrus": {"latency": "high"}}},
                     multilingual=False, buffered_audio=False)
    assert s.latency == "high"


def test_update_is_all_or_nothing_and_language_is_checked_against_the_model():
    session = _session()
    events, _ = _send(session, {"type": "session.update", "session": {
        "susurrus": {"latency": "low"}, "audio": {"input": {"format": {"type": "audio/pcm", "rate": 44}}}}})
    assert events[0]["error"]["code"] == "unsupported_sample_rate"
    assert session.settings == SessionSettings()
    events, _ = _send(session, {"type": "session.update", "session": {
        "audio": {"input": {"transcription": {"language": "de"}}}}})
    assert events[0]["error"]["code"] == "invalid_value" and "English-only" in events[0]["error"]["message"]
    events, _ = _send(session, {"type": "session.update", "session": {"susurrus": {"chunk_ms": 5}}})
    assert events[0]["error"]["code"] == "invalid_value" and "chunk_ms" in events[0]["error"]["message"]


def test_flow_control_counts_accepted_audio_until_the_worker_is_done():
    """At the limit the session asks the server to stop reading (``has_room``), and never
    refuses an append: the one read past the limit is taken like any other."""
    session = _session(max_buffered_s=1.0)
    second = np.zeros(12000, np.int16)  # 0.5 s at 24 kHz
    _, works = _send(session, append_event(second))
    assert session.has_room
    _, more = _send(session, append_event(second))
    assert not session.has_room  # 1 s awaits the model: the server reads no further
    events, third = _send(session, append_event(second, "third"))
    assert not events and len(works) == len(more) == len(third) == 1
    session.done(works[0])  # the worker transcribed the first half second
    assert not session.has_room
    session.done(more[0])
    assert session.has_room
    assert session.item is not None and session.item.accepted_samples == 3 * 12000


def test_a_turn_signal_with_commit_ends_the_item_as_a_client_commit_would(tiny):
    """The seam server-side endpointing plugs into: a policy's ``commit`` signal from the worker
    goes through ``RealtimeSession.turn`` and yields speech_stopped, committed and the work that
    completes the item."""
    session = _session()
    metrics = session.metrics
    transcriber = Transcriber(tiny, metrics)
    rng = np.random.default_rng(0)
    _, works = _send(session, append_event((rng.standard_normal(24000) * 200).astype(np.int16)))
    item = works[0].item
    for work in works:
        transcriber.run(work)
        session.done(work)
    events, finish = session.turn(TurnSignal("speech_stopped", 1000, commit=True))
    assert [e["type"] for e in events] == ["input_audio_buffer.speech_stopped", "input_audio_buffer.committed"]
    assert events[1]["item_id"] == item.id and session.item is None
    result = transcriber.run(finish[0])
    assert result.events[-1]["type"] == "conversation.item.input_audio_transcription.completed"
    assert result.events[-1]["item_id"] == item.id
    assert session.turn(TurnSignal("speech_started", 0)) == ([], [])  # no open item: nothing to do
