"""The fuzzer's realtime runners: a case played into the protocol layer (depth 1), with a real
model in-process (depth 2), and against the real server on loopback (depth 3), each checking
the protocol's promises (``protocol_fuzz.py`` lists them)."""

from __future__ import annotations

import base64
import json
import math
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
from fuzz_cases import ANSWERS, COMPLETED, FAILED, REALTIME_CODES, CaseResult, Step, _dumps, single_steps
from hypothesis import strategies as st

from susurrus.client import append_event, session_update
from susurrus.server.metrics import Metrics
from susurrus.server.realtime import protocol as rp
from susurrus.server.realtime.items import Item, TurnStream, Work
from susurrus.server.realtime.session import RealtimeSession
from susurrus.server.realtime.settings import Limits

# ---------------------------------------------------------------------------- depth 1: the protocol layer


def strict_json(event: dict[str, Any]) -> str | None:
    """``None`` when ``event`` is strict JSON (RFC 8259: no NaN or Infinity); else why not."""
    try:
        json.dumps(event, allow_nan=False)
    except (ValueError, TypeError) as err:
        return f"{event.get('type')} is not strict JSON: {err}"
    return None


def check_error(event: dict[str, Any], client_event_id: str | None, codes: set[str]) -> list[str]:
    """An ``error`` event as the protocol promises: ``error.{type, code, message, param, event_id}``
    with a documented code, a message, the client event's ``event_id`` echoed."""
    err = event.get("error")
    if not isinstance(err, dict):
        return [f"error event without an error object: {event}"]
    out = []
    if set(err) != {"type", "code", "message", "param", "event_id"}:
        out.append(f"error fields {sorted(err)}")
    if err.get("code") not in codes:
        out.append(f"undocumented error code {err.get('code')!r}: {err.get('message')}")
    if not (isinstance(err.get("message"), str) and err["message"]) or not isinstance(err.get("type"), str):
        out.append(f"error without a message or type: {err}")
    if err.get("param") is not None and not isinstance(err.get("param"), str):
        out.append(f"error param {err.get('param')!r} is not a string")
    if client_event_id is not None and err.get("event_id") != client_event_id:
        out.append(f"error event_id {err.get('event_id')!r} does not echo the client's {client_event_id!r}")
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _client_event(step: Step, max_bytes: int) -> dict[str, Any] | None:
    """The client event a text frame holds, as the protocol reads it (None: not an event)."""
    if step.kind != "text" or len(step.payload) > max_bytes:
        return None
    try:  # strict JSON (RFC 8259): no NaN or Infinity, numbers in range
        event = json.loads(step.payload, parse_constant=_no_constant,
                           parse_float=lambda text: _no_constant(text) if math.isinf(float(text)) else float(text))
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None


def _pcm_len(event: dict[str, Any]) -> int | None:
    try:
        raw = base64.b64decode(event.get("audio"), validate=True)
    except Exception:  # noqa: BLE001
        return None
    return len(raw) // 2 if len(raw) % 2 == 0 else None


def _snapshot(s: RealtimeSession) -> tuple:
    return (s.settings, s.item, s.item.accepted_samples if s.item else None, s.turns,
            s.turns.accepted_samples if s.turns else None, s.pending_s, s.accepted_s, s.chain.last)


class ProtocolChecker:
    """Plays steps into a :class:`RealtimeSession` and checks each answer (depth 1); the runners
    below reuse it as the oracle of what the server must answer."""

    def __init__(self, limits: Limits, speech: np.ndarray | None = None, multilingual: bool = False):
        self.limits = limits
        self.session = RealtimeSession(model_name="tiny.en", multilingual=multilingual, limits=limits,
                                       metrics=Metrics())
        self.speech = speech if speech is not None else np.zeros(0, np.int16)
        self.speech_at = 0
        self.appended: dict[int, int] = {}  # id(item) -> samples in its append work
        self._held: list[Any] = []  # those items, alive: a freed item's id() goes to the next one
        self.result = CaseResult()

    def frame(self, step: Step) -> tuple[str | bytes, dict[str, Any] | None]:
        """The frame a step sends, and the client event it holds."""
        if step.kind == "speech":
            piece = self.speech[self.speech_at:self.speech_at + step.payload]
            self.speech_at += len(piece)
            text = _dumps(append_event(piece))
            return text, json.loads(text)
        if step.kind == "commit":
            return _dumps({"type": "input_audio_buffer.commit"}), {"type": "input_audio_buffer.commit"}
        return step.payload, _client_event(step, self.limits.max_message_bytes)

    def play(self, step: Step) -> tuple[list[dict[str, Any]], list[Work], str | bytes]:
        frame, event = self.frame(step)
        s = self.session
        before = _snapshot(s)
        before_item, before_turns, before_last = s.item, s.turns, s.chain.last
        room, refusing = s.has_room, s.refusing  # past the backlog bound an append is refused (said once a run)
        self.result.steps += 1
        try:
            events, works = s.receive(frame)
        except Exception as err:  # noqa: BLE001 - the finding
            self.result.crashes.append(f"{step.label}: RealtimeSession.receive raised {type(err).__name__}: "
                                       f"{str(err)[:200]} on {str(frame)[:120]!r}")
            return [], [], frame
        v = self.result.violations
        where = f"{step.label} {str(frame)[:100]!r}"
        for e in events:
            if (why := strict_json(e)) is not None:
                v.append(f"{where}: {why}")
        errors = [e for e in events if e["type"] == "error"]
        kind = event["type"] if event else None
        event_id = event.get("event_id") if event and isinstance(event.get("event_id"), str) else None
        if errors:
            self.result.errors.update(e["error"].get("code") for e in errors)
            if len(events) != 1 or works:
                v.append(f"{where}: an error came with more: {[e['type'] for e in events]}, {len(works)} works")
            for e in errors:
                v += [f"{where}: {p}" for p in check_error(e, event_id, REALTIME_CODES)]
            if _snapshot(s) != before:
                v.append(f"{where}: a refused event changed the session ({errors[0]['error']['code']})")
            return events, works, frame
        if kind is None:
            v.append(f"{where}: a frame that is not an event was accepted: {[e['type'] for e in events]}")
        elif kind in ("session.update", "transcription_session.update"):
            want = "transcription_session.updated" if kind.startswith("transcription") else "session.updated"
            if [e["type"] for e in events] != [want]:
                v.append(f"{where}: answered {[e['type'] for e in events]}, not [{want}]")
            if any(w.kind != "end" for w in works) or len(works) > 1:
                v.append(f"{where}: an update queued {[w.kind for w in works]}")
            if before_item is not None and before_item.accepted_samples and s.item is not before_item:
                v.append(f"{where}: an update dropped the buffered item")
        elif kind == "input_audio_buffer.append":
            n = _pcm_len(event)
            if events:
                v.append(f"{where}: an append was answered {[e['type'] for e in events]}")
            if n and not room and not works:  # refused silently: its run was said already
                if not refusing or _snapshot(s) != before:
                    v.append(f"{where}: an append past the bound was refused unsaid, or changed the session")
            elif n is None:
                v.append(f"{where}: broken audio accepted")
            elif (n == 0 and works) or (n and (len(works) != 1 or len(works[0].pcm) != n)):
                v.append(f"{where}: {n} samples became {[len(w.pcm) for w in works]}")
            for w in works:
                if id(w.item) not in self.appended:
                    self._held.append(w.item)
                self.appended[id(w.item)] = self.appended.get(id(w.item), 0) + len(w.pcm)
                if w.item is not (s.turns if s.settings.server_turns else s.item):
                    v.append(f"{where}: audio queued for an item that is not the open one")
                if w.item.accepted_samples != self.appended[id(w.item)]:
                    v.append(f"{where}: the item counts {w.item.accepted_samples} samples, "
                             f"its appends {self.appended[id(w.item)]}")
        elif kind == "input_audio_buffer.commit":
            if s.settings.server_turns:
                if events or [w.kind for w in works] != ["commit"]:
                    v.append(f"{where}: a turn commit gave {[e['type'] for e in events]}, {len(works)} works")
            else:
                ok = (len(events) == 1 and events[0]["type"] == "input_audio_buffer.committed"
                      and before_item is not None and events[0]["item_id"] == before_item.id
                      and events[0]["previous_item_id"] == before_last and len(works) == 1
                      and works[0].item is before_item and s.item is None)
                if not ok:
                    v.append(f"{where}: commit answered {[e['type'] for e in events]}")
                elif before_item.accepted_samples != self.appended.get(id(before_item), 0):
                    v.append(f"{where}: committed {before_item.accepted_samples} samples, appended "
                             f"{self.appended.get(id(before_item), 0)}")
        elif kind == "input_audio_buffer.clear":
            if s.settings.server_turns:
                if events or [w.kind for w in works] != ["clear"] or works[0].item is not (before_turns or
                                                                                           works[0].item):
                    v.append(f"{where}: a turn clear gave {[e['type'] for e in events]}, {len(works)} works")
            elif [e["type"] for e in events] != ["input_audio_buffer.cleared"] or works or s.item is not None \
                    or (before_item is not None and not before_item.dropped):
                v.append(f"{where}: clear answered {[e['type'] for e in events]}")
        else:
            v.append(f"{where}: {kind!r} was not refused")
        try:
            s.settings.stream_config()
        except Exception as err:  # noqa: BLE001
            v.append(f"{where}: the settings it left do not make a stream: {err}")
        return events, works, frame


def run_protocol(steps: list[Step], limits: Limits) -> CaseResult:
    """Depth 1: the steps into a :class:`RealtimeSession`; the worker's side is ``done``."""
    t0 = time.monotonic()
    checker = ProtocolChecker(limits)
    works: list[Work] = []
    for step in steps:
        if step.kind in ("close", "drop", "oversize"):
            break
        events, more, _ = checker.play(step)
        checker.result.events += len(events)
        works += more
    s = checker.session
    for w in works:
        s.done(w)
    if abs(s.pending_s) > 1e-6 or not s.has_room:
        checker.result.violations.append(f"{s.pending_s} s still pending once every work is done")
    s.close([])
    checker.result.wall_s = time.monotonic() - t0
    return checker.result


# ---------------------------------------------------------------------------- depth 2: with the model


def transcribed_cases(max_bytes: int) -> st.SearchStrategy:
    """Short cases for a real model: extreme but cheap settings, turn detection, full-scale PCM,
    at most ~1.5 s of audio."""
    return st.lists(single_steps(max_bytes, max_samples=6000), min_size=1, max_size=8).filter(
        lambda steps: sum(len(s.payload) for s in steps if s.kind == "text") < 6 * 6000 * 1.4 + 20_000)


def run_transcribed(steps: list[Step], model: Any, limits: Limits) -> CaseResult:
    """Depth 2: as :func:`run_protocol`, and each work run on ``model`` by a real
    :class:`~susurrus.server.realtime.transcriber.Transcriber`, in order, as the server's
    worker does (turn signals back into the session). Checks the model's side: nothing fails,
    every commit completes its item with all its accepted audio, every clear is answered."""
    from susurrus.server.realtime.transcriber import Transcriber

    t0 = time.monotonic()
    checker = ProtocolChecker(limits)
    result, s = checker.result, checker.session
    transcriber = Transcriber(model, s.metrics)
    v = result.violations
    owed: list[tuple[str, Any]] = []  # answers the worker owes: ("completed", item) / ("cleared", ts)

    def run(work: Work) -> None:
        try:
            out = transcriber.run(work)
        except Exception as err:  # noqa: BLE001
            result.crashes.append(f"Transcriber.run({work.kind}) raised {type(err).__name__}: {err}")
            return
        s.done(work)
        result.events += len(out.events)
        for e in out.events:
            if (why := strict_json(e)) is not None:
                v.append(why)
            if e["type"] == FAILED or (e["type"] == "error" and e["error"]["code"] == rp.TRANSCRIPTION_FAILED):
                v.append(f"transcription failed: {e.get('error')}")
            elif e["type"] == "error":
                result.errors[e["error"]["code"]] += 1
                v.extend(check_error(e, work.event_id, REALTIME_CODES))
        types = [e["type"] for e in out.events]
        if isinstance(work.item, Item) and work.kind == "commit":
            done = [e for e in out.events if e["type"] == COMPLETED]
            want = work.item.accepted_samples / work.item.rate
            if len(done) != 1 or done[0]["item_id"] != work.item.id:
                v.append(f"commit of {work.item.id} gave {types}")
            elif abs(done[0]["usage"]["seconds"] - want) > 0.002:
                v.append(f"item {work.item.id}: {done[0]['usage']['seconds']} s transcribed of {want:.4f} s accepted")
        if isinstance(work.item, TurnStream):
            if work.kind == "clear" and types[-1:] != ["input_audio_buffer.cleared"]:
                v.append(f"a clear gave {types}")
            if work.kind == "commit" and not (COMPLETED in types or "error" in types):
                v.append(f"a turn commit gave {types}")
        for signal in out.signals:
            for w in s.turn(signal)[1]:
                run(w)

    for step in steps:
        if step.kind in ("close", "drop", "oversize"):
            break
        events, works, _ = checker.play(step)
        result.events += len(events)
        for w in works:
            run(w)
    if abs(s.pending_s) > 1e-6:
        v.append(f"{s.pending_s} s still pending once every work is done")
    del owed
    try:
        s.close([])
        transcriber.close()
    except Exception as err:  # noqa: BLE001
        result.crashes.append(f"closing raised {type(err).__name__}: {err}")
    result.wall_s = time.monotonic() - t0
    return result


# ---------------------------------------------------------------------------- depth 3: the real server


@st.composite
def speech_cases(draw: Any, max_bytes: int, pieces: int = 4) -> list[Step]:
    """A session on the real server: a valid ``session.update`` (client commits), real speech
    appended in ``pieces`` with bad or irrelevant frames between them (never a commit, a clear or
    other audio, which would change the item: :func:`_changes_item`), the commit, then a few random frames and an
    ending: a clean close, the socket vanishing mid-stream, or a frame past the WebSocket limit."""
    rate = draw(st.sampled_from([24000, 16000]))
    latency = draw(st.sampled_from(["low", "medium", "high"]))
    steps = [Step("text", _dumps(session_update(rate, latency=latency)), "real")]
    between = single_steps(max_bytes, max_samples=2400, turns=False, buffer=False).filter(
        lambda s: not _changes_item(s, max_bytes))
    for _ in range(pieces):
        steps.append(Step("speech", None, "speech"))
        steps += draw(st.lists(between, max_size=2))
    steps.append(Step("commit", None, "commit"))
    steps += draw(st.lists(single_steps(max_bytes, max_samples=2400, turns=False), max_size=3))
    steps.append(Step(draw(st.sampled_from(["close", "drop", "oversize"])), None, "end"))
    return steps


def _changes_item(step: Step, max_bytes: int) -> bool:
    """Whether a frame, read as the protocol reads it, is audio or a commit or clear of the
    buffer (a non-JSON frame can be one: ``{"type": "input_audio_buffer.commit", "x": 99…9}``
    is a valid commit with an extra field)."""
    ev = _client_event(step, max_bytes)
    kind = ev.get("type") if ev else None
    return (kind in ("input_audio_buffer.commit", "input_audio_buffer.clear")
            or (kind == "input_audio_buffer.append" and bool(_pcm_len(ev))))


def _speech_pieces(steps: list[Step], speech: np.ndarray) -> list[Step]:
    n = sum(1 for s in steps if s.kind == "speech")
    size = -(-len(speech) // max(1, n))
    return [Step("speech", size, s.label) if s.kind == "speech" else s for s in steps]


def run_server(steps: list[Step], srv: Any, speech: dict[int, np.ndarray], expected: Any,
               bound_s: float = 60.0) -> CaseResult:
    """Depth 3: ``steps`` against the real server ``srv`` on loopback. ``speech``: the real
    recording as PCM16 at 16 and 24 kHz; ``expected(rate, config)``: its transcript when streamed
    with that configuration. Each message must be answered as the protocol layer answers it (same
    event types and error codes, in order) within ``bound_s``; the commit of the speech must
    complete with its exact transcript; the session gauge must return to 0 after the ending."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    t0 = time.monotonic()
    limits = srv.state.limits
    rate = json.loads(steps[0].payload)["session"]["audio"]["input"]["format"]["rate"]
    checker = ProtocolChecker(limits, speech[rate])
    steps = _speech_pieces(steps, speech[rate])
    result = CaseResult(steps=len(steps))  # the server's answers (the checker keeps the protocol layer's)
    v = result.violations
    received: list[dict[str, Any]] = []
    speech_item: Item | None = None  # the protocol layer's item of the speech (its settings)
    speech_id: str | None = None  # the server's

    def recv(ws: Any, deadline: float) -> dict[str, Any] | None:
        try:
            event = json.loads(ws.recv(timeout=max(0.05, deadline - time.monotonic())))
        except TimeoutError:
            return None
        received.append(event)
        result.events += 1
        if event["type"] == "error":
            result.errors[event["error"].get("code")] += 1
        if event["type"] == FAILED:
            v.append(f"transcription failed: {event.get('error')}")
        return event

    def answers(ws: Any, want: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        """Receive until the answers ``want`` (the protocol layer's) came, in order; returns them."""
        deadline = time.monotonic() + bound_s
        got: list[dict[str, Any]] = []
        for w in want:
            while True:
                event = recv(ws, deadline)
                if event is None:
                    result.hangs.append(f"no {w['type']} within {bound_s:.0f} s after {what}")
                    return got
                if event["type"] in ANSWERS:
                    break
            got.append(event)
            if event["type"] != w["type"] or (w["type"] == "error" and event["error"]["code"] != w["error"]["code"]):
                got = event["error"]["code"] if event["type"] == "error" else event["type"]
                v.append(f"after {what}: the server answered {got}, the protocol layer "
                         f"{w['error']['code'] if w['type'] == 'error' else w['type']}")
            if event["type"] == "error":
                v.extend(check_error(event, w["error"]["event_id"], REALTIME_CODES))
            if (why := strict_json(event)) is not None:
                v.append(why)
        return got

    ending = "close"
    with connect(srv.url, max_size=None, open_timeout=10) as ws:
        try:
            first = recv(ws, time.monotonic() + bound_s)
            if first is None or first["type"] != "session.created":
                v.append(f"the session opened with {first}")
            for step in steps:
                if step.kind in ("close", "drop", "oversize"):
                    ending = step.kind
                    break
                if step.kind == "commit":
                    speech_item = checker.session.item
                events, _, frame = checker.play(step)
                ws.send(frame)
                got = answers(ws, [e for e in events if e["type"] in ANSWERS], f"{step.label} {str(frame)[:80]!r}")
                if step.kind == "commit":  # the server's item id for the speech
                    speech_id = next((e["item_id"] for e in got if e["type"] == "input_audio_buffer.committed"), None)
                if result.hangs:
                    break
            if speech_item is not None and not result.hangs:
                deadline = time.monotonic() + 2 * bound_s
                while not any(e["type"] == COMPLETED and e["item_id"] == speech_id for e in received):
                    if recv(ws, deadline) is None:
                        result.hangs.append(f"no completed for the speech within {2 * bound_s:.0f} s")
                        break
                done = [e for e in received if e["type"] == COMPLETED and e["item_id"] == speech_id]
                if done:
                    want = expected(rate, speech_item.config)
                    if done[0]["transcript"] != want:
                        v.append(f"speech around bad events came back {done[0]['transcript']!r}, not {want!r}")
            if ending == "drop":
                ws.send(_dumps(append_event(speech[rate][:4800])))  # audio in flight, then the socket vanishes
                ws.socket.shutdown(socket.SHUT_RDWR)
            elif ending == "oversize":
                ws.send(_dumps({"type": "input_audio_buffer.append", "audio": "A" * (4 * limits.max_message_bytes
                                                                                      + 1024)}))
                try:
                    while recv(ws, time.monotonic() + bound_s) is not None:
                        pass
                    result.hangs.append("a frame past 4x the limit did not close the connection")
                except ConnectionClosed as closed:
                    if closed.rcvd is None or closed.rcvd.code != 1009:
                        v.append(f"a frame past 4x the limit closed with {closed.rcvd}, not 1009")
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            (result.crashes if code == 1011 else v).append(f"the server closed the connection ({code}) mid-case")
        except OSError:
            if ending != "drop":
                raise
    for event in received:
        if (why := strict_json(event)) is not None and why not in v:
            v.append(why)
    result.crashes += checker.result.crashes
    v += checker.result.violations
    if not _gauge_returns(srv.http_url, bound_s):
        result.hangs.append(f"sessions_open did not return to 0 within {bound_s:.0f} s after a {ending}")
    result.wall_s = time.monotonic() - t0
    return result


def metric(http_url: str, key: str) -> float:
    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _gauge_returns(http_url: str, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while metric(http_url, "susurrus_sessions_open") != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
