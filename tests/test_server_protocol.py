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
    """A session whose client commits (``turn_detection: null``, as sent by ``update_event``)."""
    session = RealtimeSession(model_name="tiny.en", multilingual=False, limits=Limits(**limits), metrics=Metrics())
    session.receive(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    return session


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
    assert session.settings == SessionSettings(turn_detection=None, turn_detection_set=True)
    events, _ = _send(session, {"type": "session.update", "session": {
        "audio": {"input": {"transcription": {"language": "de"}}}}})
    assert events[0]["error"]["code"] == "invalid_value" and "English-only" in events[0]["error"]["message"]
    events, _ = _send(session, {"type": "session.update", "session": {"susurrus": {"chunk_ms": 5}}})
    assert events[0]["error"]["code"] == "invalid_value" and "chunk_ms" in events[0]["error"]["message"]


def test_the_backlog_bound_refuses_appends_with_an_error_until_the_worker_catches_up():
    """Audio accepted but not transcribed is counted until the worker is done with it; past
    ``max_buffered_s`` an append is refused with ``input_audio_backlog_full`` (said once per run
    of refused appends, with the first one's event id), and taken again once there is room."""
    session = _session(max_buffered_s=1.0)
    second = np.zeros(12000, np.int16)  # 0.5 s at 24 kHz
    _, works = _send(session, append_event(second))
    assert session.has_room
    _, more = _send(session, append_event(second))
    assert not session.has_room  # 1 s awaits the model
    events, third = _send(session, append_event(second, "third"))
    assert not third and len(events) == 1
    error = events[0]["error"]
    assert (error["code"], error["event_id"], error["type"]) == ("input_audio_backlog_full", "third",
                                                                 "invalid_request_error")
    assert "real-time pace" in error["message"] and "--max-buffered-s" in error["message"]
    assert _send(session, append_event(second, "fourth")) == ([], [])  # refused, not said again
    session.done(works[0])  # the worker transcribed the first half second
    events, fifth = _send(session, append_event(second, "fifth"))
    assert not events and len(fifth) == 1
    assert session.item is not None and session.item.accepted_samples == 3 * 12000
    events, _ = _send(session, append_event(second, "sixth"))  # full again: said again
    assert events[0]["error"]["event_id"] == "sixth"
    assert session.metrics.errors[("invalid_request_error", "input_audio_backlog_full")] == 3


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
