"""Server turn detection (OpenAI ``server_vad`` / ``semantic_vad``): a real server on loopback,
real weights, real speech with silence inserted between utterances; the official OpenAI SDK,
a raw WebSocket client and the ``susurrus client --turns`` command."""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from server_helpers import SDK_WEBSOCKET_OPTIONS, Conn, pcm16_at, update_event

from susurrus.audio.io import decode_audio
from susurrus.client import append_event
from susurrus.evaluation import signals
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.server.metrics import Metrics
from susurrus.server.realtime.items import TurnStream
from susurrus.server.realtime.session import RealtimeSession
from susurrus.server.realtime.settings import EAGERNESS_SILENCE_MS, Limits, default_turn_detection
from susurrus.server.realtime.transcriber import Transcriber

UTTERANCES = (1, 7, 12)  # short LJSpeech utterances of the long-form stream: 1.9, 1.8 and 2.6 s
CONTEXT_S = 0.2  # audio kept either side of each (their natural pauses are 0.4 s)
GAP_S = 1.0  # silence inserted between them: 1.4 s of pause with the context (server VAD ends a turn at 0.5 s)
LEAD_S, TAIL_S = 0.5, 1.0
STARTED = "input_audio_buffer.speech_started"
STOPPED = "input_audio_buffer.speech_stopped"
COMMITTED = "input_audio_buffer.committed"
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def speech(longform_items) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Three utterances (16 kHz) with 1 s of digital silence between them, 0.5 s before and
    1 s after; and their segments (``start_s``, ``end_s``, ``text``) in the new audio."""
    item = next((i for i in longform_items if i.id.startswith("dev_ljspeech")), None)
    if item is None or len(item.segments) <= max(UTTERANCES):
        pytest.skip("the LJSpeech long-form stream (with segments) is not in the manifest")
    full = decode_audio(str(item.audio))
    pieces, segments, t = [], [], 0.0
    for k in UTTERANCES:
        seg = item.segments[k]
        a, b = round((seg["start_s"] - CONTEXT_S) * 16000), round((seg["end_s"] + CONTEXT_S) * 16000)
        pieces.append(full[a:b])
        segments.append({**seg, "start_s": t + CONTEXT_S, "end_s": t + (b - a) / 16000 - CONTEXT_S})
        t += (b - a) / 16000
    audio, segments = signals.insert_gaps(np.concatenate(pieces), segments, GAP_S)
    audio = np.concatenate([signals.silence(LEAD_S), audio, signals.silence(TAIL_S)])
    for seg in segments:
        seg["start_s"] += LEAD_S
        seg["end_s"] += LEAD_S
    return audio, segments


def turns_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events grouped by item, in the order the items started: for each, its speech_started,
    speech_stopped, committed and completed events (each once), deltas, and their positions."""
    by_item: dict[str, dict[str, Any]] = defaultdict(lambda: {"deltas": [], "at": {}})
    order: list[str] = []
    for i, e in enumerate(events):
        item_id = e.get("item_id")
        if item_id is None:
            continue
        turn = by_item[item_id]
        if item_id not in order:
            order.append(item_id)
        if e["type"] == DELTA:
            turn["deltas"].append(e["delta"])
        elif e["type"] in (STARTED, STOPPED, COMMITTED, COMPLETED):
            assert e["type"] not in turn, f"two {e['type']} for {item_id}"
            turn[e["type"]] = e
            turn["at"][e["type"]] = i
    return [{"id": item_id, **by_item[item_id]} for item_id in order]


def check_turns(turns: list[dict[str, Any]], segments: list[dict[str, Any]], *, prefix_ms: int, silence_ms: int,
                previous: str | None = None) -> None:
    """One turn per utterance, each announced, committed and completed once, in that order;
    times within 0.6 s of the utterance (OpenAI's: padding and silence included) and within
    0.25 s once the padding and silence are taken off; transcripts close to the utterances."""
    assert len(turns) == len(segments), [t.get(COMPLETED, {}).get("transcript") for t in turns]
    for turn, seg in zip(turns, segments):
        at = turn["at"]
        assert at[STARTED] < at[STOPPED] < at[COMMITTED] < at[COMPLETED], at
        start_ms, end_ms = turn[STARTED]["audio_start_ms"], turn[STOPPED]["audio_end_ms"]
        assert abs(start_ms / 1000 - seg["start_s"]) <= 0.6 and abs(end_ms / 1000 - seg["end_s"]) <= 0.6, (
            start_ms, end_ms, seg)
        assert abs((start_ms + prefix_ms) / 1000 - seg["start_s"]) <= 0.25, (start_ms, seg)
        assert abs((end_ms - silence_ms) / 1000 - seg["end_s"]) <= 0.25, (end_ms, seg)
        assert turn[COMMITTED]["previous_item_id"] == previous
        previous = turn["id"]
        transcript = turn[COMPLETED]["transcript"]
        assert turn[COMPLETED]["content_index"] == 0
        assert "".join(turn["deltas"]) == transcript  # deltas stream the turn's text as it is committed
        assert corpus_error_rate([(seg["text"], transcript)]) <= 25.0, (seg["text"], transcript)
    assert corpus_error_rate([(s["text"], t[COMPLETED]["transcript"]) for s, t in zip(segments, turns)]) <= 15.0
    assert len({t["id"] for t in turns}) == len(turns)


@pytest.mark.slow
def test_openai_sdk_receives_server_vad_turns(server, speech):
    """GA session, 24 kHz, ``server_vad`` with its three parameters set: one
    speech_started/speech_stopped pair per utterance, each turn committed automatically and
    completed with its transcript, item ids consistent across the events."""
    openai = pytest.importorskip("openai")
    audio, segments = speech
    pcm = pcm16_at(audio, 24000)
    client = openai.OpenAI(api_key="any-key", base_url=f"{server.http_url}/v1",
                           websocket_base_url=f"ws://{server.host}:{server.port}/v1", max_retries=0)
    events = []
    with client.realtime.connect(extra_query={"intent": "transcription"},
                                 websocket_connection_options=SDK_WEBSOCKET_OPTIONS) as conn:
        conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                                "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 200,
                                                   "silence_duration_ms": 400}}},
        })
        for i in range(0, len(pcm), 2400):
            conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 2400].tobytes()).decode())
        completed = 0
        for event in conn:
            events.append(event)
            completed += event.type == COMPLETED
            if completed == len(segments) or event.type == "error":
                break
    assert "error" not in [e.type for e in events], [e for e in events if e.type == "error"]
    updated = next(e for e in events if e.type == "session.updated")
    td = updated.session.audio.input.turn_detection
    assert (td.type, td.threshold, td.prefix_padding_ms, td.silence_duration_ms) == ("server_vad", 0.5, 200, 400)
    # the SDK parsed every event into its own types
    assert {type(e).__name__ for e in events if e.type in (STARTED, STOPPED, COMMITTED, COMPLETED)} == {
        "InputAudioBufferSpeechStartedEvent", "InputAudioBufferSpeechStoppedEvent",
        "InputAudioBufferCommittedEvent", "ConversationItemInputAudioTranscriptionCompletedEvent"}
    dicts = [e.model_dump() for e in events]
    print("\n" + "\n".join(json.dumps({k: v for k, v in e.items() if k not in ("event_id", "session", "usage")})
                           for e in dicts if e["type"] in (STARTED, STOPPED, COMMITTED, DELTA, COMPLETED)))
    check_turns(turns_of(dicts), segments, prefix_ms=200, silence_ms=400)


@pytest.mark.slow
def test_a_session_that_never_sets_turn_detection_gets_openais_server_vad(server, speech):
    """Raw protocol, no ``session.update`` at all: OpenAI's default for a transcription session
    (server VAD, threshold 0.5, 300 ms padding, 500 ms silence) is reported in ``session.created``
    and runs: each utterance is committed and completed by itself, with no client commit."""
    audio, segments = speech
    with Conn(server.url) as c:
        td = c.until("session.created")["session"]["audio"]["input"]["turn_detection"]
        assert td == {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
        c.append(pcm16_at(audio, 24000), 2400)
        while sum(e["type"] == COMPLETED for e in c.events) < len(segments):
            c.recv()
    assert not c.errors()
    check_turns(turns_of(c.events), segments, prefix_ms=300, silence_ms=500)


def test_the_default_follows_the_model_and_null_turns_it_off():
    """OpenAI's realtime-only models have no server turn detection (their clients commit): a
    session naming one without ``turn_detection`` gets ``null``; an explicit choice is kept
    whatever model comes after; ``null`` turns server VAD off."""
    session = _session()
    assert session.settings.turn_detection == default_turn_detection()
    model = {"type": "session.update", "session": {"audio": {"input": {
        "transcription": {"model": "gpt-realtime-whisper"}}}}}
    _send(session, model)
    assert session.settings.turn_detection is None
    _send(session, {"type": "session.update", "session": {"audio": {"input": {
        "transcription": {"model": "gpt-4o-transcribe"}}}}})
    assert session.settings.turn_detection == default_turn_detection()
    _send(session, _vad(type="semantic_vad"))
    _send(session, model)
    assert session.settings.turn_detection == {"type": "semantic_vad", "eagerness": "auto"}
    events, _ = _send(session, _vad())
    assert session.settings.turn_detection is None and not session.settings.server_turns
    assert events[0]["session"]["audio"]["input"]["turn_detection"] is None


@pytest.mark.slow
def test_client_commit_forces_the_end_of_a_turn_and_the_clock_runs_on(server, speech):
    """Beta session (``transcription_session.update``), ``server_vad`` with OpenAI's defaults. A
    client commit inside the second utterance ends its turn there (speech_stopped, committed,
    completed with the words so far); a commit with no turn open is an error that arrives after
    everything earlier audio caused; the rest of the audio goes on in the same session clock."""
    audio, segments = speech
    cut = round((segments[1]["start_s"] + 1.0) * 16000)  # one second into the second utterance
    pcm = pcm16_at(audio, 24000)
    with Conn(server.url, additional_headers={"OpenAI-Beta": "realtime=v1"}) as c:
        assert c.recv()["type"] == "transcription_session.created"
        c.send({"type": "transcription_session.update",
                "session": {"input_audio_format": "pcm16", "turn_detection": {"type": "server_vad"},
                            "input_audio_transcription": {"model": "whisper-1", "language": "en"}}})
        td = c.until("transcription_session.updated")["session"]["turn_detection"]
        assert td == {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
        c.append(pcm[:cut * 3 // 2], 2400)
        c.send({"type": "input_audio_buffer.commit", "event_id": "force"})
        c.send({"type": "input_audio_buffer.commit", "event_id": "nothing-open"})
        empty = c.until("error")["error"]
        assert (empty["code"], empty["event_id"]) == ("input_audio_buffer_commit_empty", "nothing-open")
        early = turns_of(c.events)
        c.append(pcm[cut * 3 // 2:], 2400, "b")
        while sum(e["type"] == COMPLETED for e in c.events) < 4:
            c.recv()
    assert not [e for e in c.errors() if e["event_id"] != "nothing-open"]
    assert len(early) == 2 and all(COMPLETED in t for t in early)  # the error came after both turns
    forced = early[1]
    assert forced[STOPPED]["audio_end_ms"] == pytest.approx(cut / 16, abs=40)  # the commit point
    # the words heard up to the cut (the last one cut short: the decoder guesses its end)
    assert 0 < len(forced[COMPLETED]["transcript"].split()) <= len(segments[1]["text"].split())
    turns = turns_of(c.events)
    assert turns[:2] == early
    rest = turns[2]  # the rest of the second utterance opens a turn at once
    assert rest[STARTED]["audio_start_ms"] == pytest.approx(cut / 16, abs=100)
    # the word the cut splits is read twice, in part (one substitution and one insertion of 4 words)
    assert corpus_error_rate([(segments[1]["text"], forced[COMPLETED]["transcript"] + " "
                               + rest[COMPLETED]["transcript"])]) <= 50.0
    assert rest[COMMITTED]["previous_item_id"] == forced["id"]
    check_turns([turns[0]], segments[:1], prefix_ms=300, silence_ms=500)
    check_turns([turns[3]], segments[2:], prefix_ms=300, silence_ms=500, previous=rest["id"])


@pytest.mark.slow
def test_semantic_vad_and_the_client_command(server, speech, tmp_path, capsys):
    """``semantic_vad`` (eagerness high: 250 ms of silence, less after a finished sentence) over
    a raw socket; ``susurrus client --turns`` prints one line per turn."""
    audio, segments = speech
    with Conn(server.url) as c:
        c.until("session.created")
        c.send(update_event(rate=16000, audio={"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                         "turn_detection": {"type": "semantic_vad",
                                                                            "eagerness": "high"}}}))
        td = c.until("session.updated")["session"]["audio"]["input"]["turn_detection"]
        assert td == {"type": "semantic_vad", "eagerness": "high"}
        c.append(pcm16_at(audio, 16000), 1600)
        while sum(e["type"] == COMPLETED for e in c.events) < len(segments):
            c.recv()
    assert not c.errors()
    turns = turns_of(c.events)
    assert len(turns) == len(segments)
    for turn, seg in zip(turns, segments):  # the turn ends 125..500 ms after the speech, depending on the text
        assert 0.0 <= turn[STOPPED]["audio_end_ms"] / 1000 - seg["end_s"] <= 0.6
    assert corpus_error_rate([(s["text"], t[COMPLETED]["transcript"]) for s, t in zip(segments, turns)]) <= 15.0

    from susurrus.cli.main import main

    wav = tmp_path / "three.wav"
    sf.write(wav, audio, 16000, subtype="PCM_16")
    capsys.readouterr()
    assert main(["client", server.url, str(wav), "--turns", "--rate", "16000"]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == len(segments), out
    spans = [re.match(r"\[\s*(\d+\.\d\d) ->\s*(\d+\.\d\d)\] (.+)$", line) for line in lines]
    assert all(spans), lines  # each turn with its span in seconds of the stream, as `stream --turns` prints
    for span, seg in zip(spans, segments):
        assert float(span[1]) <= seg["start_s"] + 0.3 and 0.0 <= float(span[2]) - seg["end_s"] <= 0.6
    assert corpus_error_rate([(s["text"], span[3]) for s, span in zip(segments, spans)]) <= 10.0
    assert "error" not in out.err


def _session() -> RealtimeSession:
    return RealtimeSession(model_name="tiny.en", multilingual=False, limits=Limits(max_buffered_s=60),
                           metrics=Metrics())


def _send(session: RealtimeSession, event: dict[str, Any]) -> tuple[list, list]:
    return session.receive(json.dumps(event))


def _vad(**td: Any) -> dict[str, Any]:
    return {"type": "session.update", "session": {"audio": {"input": {"turn_detection": td or None}}}}


@pytest.mark.slow
def test_clear_keeps_the_turns_before_it_drops_the_open_one_and_the_clock_counts_it(tiny, speech):
    """Without a socket, the model far behind the client: a clear one second into the second
    utterance is run in order with the audio, so the first turn (ended before it) is still
    transcribed and completed, the open second turn is dropped (never committed) and
    ``cleared`` comes after all that; the audio after it opens turns whose times count it all."""
    audio, segments = speech
    session = _session()
    _send(session, update_event(rate=16000, audio={"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                             "turn_detection": {"type": "server_vad"}}}))
    transcriber = Transcriber(tiny, session.metrics)
    pcm = pcm16_at(audio, 16000)
    cut = round((segments[1]["start_s"] + 1.0) * 16000)
    first = [w for i in range(0, cut, 3200) for w in _send(session, append_event(pcm[i:min(i + 3200, cut)]))[1]]
    events = [e for w in first[:2] for e in transcriber.run(w).events]  # 0.4 s transcribed, the rest queued
    now, clear = _send(session, {"type": "input_audio_buffer.clear"})
    assert not now and [w.kind for w in clear] == ["clear"]  # cleared comes in order, from the worker
    events += [e for w in first[2:] + clear for e in transcriber.run(w).events]
    assert events[-1]["type"] == "input_audio_buffer.cleared"
    before = turns_of(events)
    assert len(before) == 2 and COMPLETED not in before[1] and COMMITTED not in before[1]
    check_turns(before[:1], segments[:1], prefix_ms=300, silence_ms=500)
    # every append ran before the clear: the open turn's audio went through the model (its deltas were
    # sent), so it counts as transcribed; only audio the model never reached is dropped
    m = session.metrics
    assert m.audio_dropped_seconds == 0.0 and m.audio_seconds == pytest.approx(m.audio_accepted_seconds)
    assert m.audio_accepted_seconds == pytest.approx(cut / 16000)
    after = []
    for i in range(cut, len(pcm), 3200):
        for work in _send(session, append_event(pcm[i:i + 3200]))[1]:
            after += transcriber.run(work).events
    turns = turns_of(after)  # the rest of the second utterance, then the third
    assert len(turns) == 2 and turns[0][STARTED]["audio_start_ms"] == pytest.approx(cut / 16, abs=100)
    check_turns(turns[1:], segments[2:], prefix_ms=300, silence_ms=500, previous=turns[0]["id"])


def test_commit_then_clear_keeps_the_committed_audio(tiny, speech):
    """What the OpenAI Agents SDK sends at the end of its input, the model far behind: commit,
    then clear at once. Client commits: the item completes with all its words. Server turn
    detection: the last turn completes, before ``cleared``."""
    audio, segments = speech
    pcm = pcm16_at(audio, 16000)[:round((segments[0]["end_s"] + 0.2) * 16000)]  # ends inside the turn
    for td in (None, {"type": "server_vad"}):
        session = _session()
        _send(session, update_event(rate=16000, audio={"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                                 "turn_detection": td}}))
        transcriber = Transcriber(tiny, session.metrics)
        works = [w for i in range(0, len(pcm), 3200) for w in _send(session, append_event(pcm[i:i + 3200]))[1]]
        now = []
        for event in ({"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.clear"}):
            sent, more = _send(session, event)
            now, works = now + sent, works + more
        events = now + [e for w in works for e in transcriber.run(w).events]
        assert not [e for e in events if e["type"] == "error"], events
        completed = [e for e in events if e["type"] == COMPLETED]
        assert len(completed) == 1 and corpus_error_rate([(segments[0]["text"], completed[0]["transcript"])]) <= 25
        types = [e["type"] for e in events]
        assert types.index(COMMITTED) < types.index("input_audio_buffer.cleared")
        if td is not None:
            assert types[-1] == "input_audio_buffer.cleared"
        assert session.metrics.audio_dropped_seconds == 0.0


def test_turn_detection_settings_map_onto_the_stream():
    session = _session()
    for bad, param in (({"type": "server_vad", "threshold": 1.5}, "threshold"),
                       ({"type": "server_vad", "silence_duration_ms": "long"}, "silence_duration_ms"),
                       ({"type": "semantic_vad", "eagerness": "eager"}, "eagerness"),
                       ({"type": "push_to_talk"}, "type")):
        events, _ = _send(session, _vad(**bad))
        assert events[0]["error"]["code"] == "invalid_value"
        assert events[0]["error"]["param"] == f"session.audio.input.turn_detection.{param}"
        assert session.settings.turn_detection == default_turn_detection()  # OpenAI's default, unchanged
    _send(session, _vad(type="server_vad", threshold=0.7, prefix_padding_ms=100, silence_duration_ms=800,
                        create_response=False))
    cfg = session.settings.stream_config()
    assert (cfg.turns.threshold, cfg.turns.prefix_padding_ms, cfg.turns.silence_duration_ms) == (0.7, 100, 800)
    assert cfg.vad_threshold == 0.7 and not cfg.semantic_turns
    assert session.settings.turn_detection["create_response"] is False  # kept, reported, not used
    for eagerness, silence in (("low", 1000), ("medium", 500), ("auto", 500), ("high", 250)):
        _send(session, _vad(type="semantic_vad", eagerness=eagerness))
        cfg = session.settings.stream_config()
        assert cfg.semantic_turns and cfg.turns.silence_duration_ms == silence == EAGERNESS_SILENCE_MS[eagerness]
        assert (cfg.turns.threshold, cfg.turns.prefix_padding_ms) == (0.5, 300)
    # one stream for the connection's audio; new stream settings end it (its open turn completes)
    _, works = _send(session, append_event(np.zeros(2400, np.int16)))
    _, more = _send(session, append_event(np.zeros(2400, np.int16)))
    assert isinstance(works[0].item, TurnStream) and works[0].item is more[0].item
    _, same = _send(session, _vad(type="semantic_vad", eagerness="high"))
    assert not same
    _, end = _send(session, {"type": "session.update", "session": {"susurrus": {"latency": "low"}}})
    assert [w.kind for w in end] == ["end"] and end[0].item is works[0].item and session.turns is None
    # back to null: items again; and server turn detection cannot start over an uncommitted item
    _send(session, _vad())
    _, works = _send(session, append_event(np.zeros(2400, np.int16)))
    assert session.item is not None and works[0].item is session.item
    events, _ = _send(session, _vad(type="server_vad"))
    assert events[0]["error"]["code"] == "turn_detection_change_with_buffered_audio"
    assert session.settings.turn_detection is None
