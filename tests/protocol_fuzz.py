"""A property-based fuzzer for the realtime WebSocket protocol and the REST upload, shared by
``tests/test_fuzz_protocol.py`` (a small, derandomized budget) and ``benchmarks/fuzz_protocol.py``
(a large one).

A *case* is a list of :class:`Step` s: text frames (JSON events, generated or mutated from a real
session's messages, or not JSON at all), binary frames, appends of real speech, and how the
connection ends. Hypothesis strategies build them (:func:`protocol_cases`, :func:`speech_cases`);
runners play them at three depths and return a :class:`CaseResult` (never raise):

- :func:`run_protocol` feeds a :class:`RealtimeSession` directly (no model, no socket) and checks
  every answer against the protocol's promises: each event is answered (or is an append), an
  error is an ``error`` event with a documented ``code``, a ``param`` and the client's
  ``event_id``, a refused event changes nothing (settings, the buffered item and its audio),
  accepted audio reaches the item's work in order, every server event is strict JSON;
- :func:`run_transcribed` also runs the session's work on a real model in-process, as the
  server's worker does (extreme settings, turn detection, full-scale PCM): nothing fails, every
  commit completes with all its accepted audio (``usage.seconds``), every clear is answered;
- :func:`run_server` plays a case against a real server on loopback: every message answered as
  the protocol layer answers it within a bound, speech appended around bad events is transcribed
  exactly (the text of the same samples streamed offline), and the session gauge returns to 0
  after clean and abrupt disconnects.

:func:`form_cases` / :func:`upload_bytes` / :func:`run_form` / :func:`run_upload` /
:func:`run_rest` do the same for ``POST /v1/audio/transcriptions``.
"""

from __future__ import annotations

import base64
import io
import json
import math
import socket
import struct
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from susurrus.transports import realtime_protocol as rp
from susurrus.transports.client import append_event, session_update
from susurrus.transports.metrics import Metrics
from susurrus.transports.realtime import RealtimeSession
from susurrus.transports.realtime_items import SAMPLE_RATE, Item, TurnStream, Work
from susurrus.transports.realtime_settings import Limits

# every error.code the realtime protocol documents (docs/architecture.md, "Limits and errors")
REALTIME_CODES = {rp.INVALID_JSON, rp.UNKNOWN_EVENT, rp.UNSUPPORTED_EVENT, rp.INVALID_VALUE, rp.MISSING_PARAM,
                  rp.INVALID_AUDIO, rp.UNSUPPORTED_FORMAT, rp.UNSUPPORTED_RATE, rp.FORMAT_LOCKED, rp.COMMIT_EMPTY,
                  rp.TURNS_LOCKED, rp.MESSAGE_TOO_LARGE, rp.BINARY_FRAME}
# the REST API's (README, "OpenAI's audio REST API")
REST_CODES = {"invalid_request", "missing_required_parameter", "invalid_value", "empty_file", "invalid_file_format",
              "audio_too_short", "audio_too_long", "file_too_large", "unsupported_value", "model_not_found"}
ANSWERS = {"error", "session.updated", "transcription_session.updated", "input_audio_buffer.committed",
           "input_audio_buffer.cleared"}
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"


@dataclass(frozen=True)
class Step:
    """One thing a client does: ``text`` / ``bytes`` (a frame), ``speech`` (append the next
    ``payload`` samples of the case's real speech), ``commit`` (of the speech), or an ending:
    ``close`` (a clean close), ``drop`` (the TCP socket vanishes mid-stream), ``oversize`` (a
    frame beyond 4x the message limit: the WebSocket layer closes, 1009)."""

    kind: str
    payload: Any = None
    label: str = ""


@dataclass
class CaseResult:
    steps: int = 0
    events: int = 0  # server events received
    errors: Counter = field(default_factory=Counter)  # error.code -> count
    crashes: list[str] = field(default_factory=list)  # an exception out of the server's code, a 1011 close
    hangs: list[str] = field(default_factory=list)  # no answer within the bound
    violations: list[str] = field(default_factory=list)  # a broken promise
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.crashes or self.hangs or self.violations)

    def problems(self) -> list[str]:
        return ([f"crash: {c}" for c in self.crashes] + [f"hang: {h}" for h in self.hangs]
                + [f"violation: {v}" for v in self.violations])


# ---------------------------------------------------------------------------- values and events

EXTREME_NUMBERS = [0, 1, -1, 2, 19, 20, 5000, 5001, 10_000, 10_001, 2**31, -2**31, 2**63, -2**63, 2**64, 10**30,
                   0.0, -0.0, 0.5, 1.0, 1e-300, 1e308, -1e308, math.nan, math.inf, -math.inf]
EXTREME_STRINGS = ["", " ", "x" * 5000, "\x00", "\u202e", "😀" * 8, "null", "NaN", "en", "pcm16", "audio/pcm",
                   "transcription", "server_vad", "semantic_vad", "<script>", "%s%n", "../" * 8]

scalars = (st.sampled_from([None, True, False, *EXTREME_NUMBERS, *EXTREME_STRINGS])
           | st.integers() | st.floats() | st.text(max_size=12))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                      max_leaves=6)


def maybe(strategy: st.SearchStrategy, p_weird: st.SearchStrategy = values) -> st.SearchStrategy:
    """Mostly sensible values, sometimes anything at all."""
    return st.one_of(strategy, strategy, strategy, strategy, strategy, p_weird)


RATES = [8000, 16000, 22050, 24000, 32000, 44100, 48000]
rates = maybe(st.sampled_from(RATES), st.sampled_from([0, -24000, 12345, 24000.0, 96000, 2**40, "24000", None]))
turn_detection = st.none() | st.fixed_dictionaries(
    {"type": maybe(st.sampled_from(["server_vad", "semantic_vad"]), st.sampled_from(["none", "", None, 1]))},
    optional={"threshold": maybe(st.sampled_from([0, 0.0, 1, 1.0, 0.5, 0.01, 0.99]) | st.floats(0, 1)),
              "prefix_padding_ms": maybe(st.sampled_from([0, 1, 300, 10_000])),
              "silence_duration_ms": maybe(st.sampled_from([0, 1, 200, 500, 10_000])),
              "eagerness": maybe(st.sampled_from(["low", "medium", "high", "auto"])),
              "create_response": values, "interrupt_response": values, "idle_timeout_ms": values})
transcription = st.fixed_dictionaries({}, optional={
    "model": maybe(st.sampled_from(["gpt-4o-transcribe", "whisper-1", "tiny.en"])),
    "language": maybe(st.sampled_from(["en", None, "", "de", "EN", "english", "xx"])),
    "prompt": maybe(st.sampled_from(["", "Sweynheim and Pannartz.", "word " * 3000]) | st.text(max_size=30)),
    "delay": maybe(st.sampled_from(["minimal", "low", "medium", "high", "xhigh", None]))})
extension = st.fixed_dictionaries({}, optional={
    "latency": maybe(st.sampled_from(["low", "medium", "high"])),
    "chunk_ms": maybe(st.sampled_from([20, 40, 100, 200, 1000, 5000, None])),
    "lookahead_ms": maybe(st.sampled_from([0, 1, 200, 1000, 5000, None]))})
ga_format = maybe(st.fixed_dictionaries({}, optional={
    "type": maybe(st.sampled_from(["audio/pcm", "audio/pcmu", "audio/pcma", ""])), "rate": rates}))
ga_session = st.fixed_dictionaries({}, optional={
    "type": maybe(st.sampled_from(["transcription", "realtime"])),
    "audio": maybe(st.fixed_dictionaries({"input": maybe(st.fixed_dictionaries({}, optional={
        "format": ga_format, "transcription": maybe(transcription), "turn_detection": maybe(turn_detection),
        "noise_reduction": values}))})),
    "include": maybe(st.sampled_from([[], ["item.input_audio_transcription.logprobs"], None])),
    "susurrus": maybe(extension)})
beta_session = st.fixed_dictionaries({}, optional={
    "input_audio_format": maybe(st.sampled_from(["pcm16", "g711_ulaw", "g711_alaw"])),
    "input_audio_transcription": maybe(transcription), "turn_detection": maybe(turn_detection),
    "include": values, "susurrus": maybe(extension)})


valid_turns = st.none() | st.fixed_dictionaries(
    {"type": st.just("server_vad")},
    optional={"threshold": st.sampled_from([0, 0.0, 1, 1.0, 0.5, 0.01, 0.99]) | st.floats(0, 1),
              "prefix_padding_ms": st.sampled_from([0, 1, 300, 10_000]),
              "silence_duration_ms": st.sampled_from([0, 1, 200, 500, 10_000]),
              "create_response": values, "idle_timeout_ms": values}) | st.fixed_dictionaries(
    {"type": st.just("semantic_vad")}, optional={"eagerness": st.sampled_from(["low", "medium", "high", "auto"]),
                                                 "interrupt_response": values})
valid_transcription = st.fixed_dictionaries({}, optional={
    "model": values, "language": st.sampled_from(["en", None, ""]),
    "prompt": st.sampled_from(["", "Sweynheim and Pannartz.", "word " * 3000]) | st.text(max_size=30),
    "delay": st.sampled_from(["minimal", "low", "medium", "high", "xhigh", None])})
valid_extension = st.fixed_dictionaries({}, optional={
    "latency": st.sampled_from(["low", "medium", "high"]), "chunk_ms": st.sampled_from([20, 40, 100, 1000, 5000]),
    "lookahead_ms": st.sampled_from([0, 1, 200, 1000, 5000, None])})
valid_ga = st.fixed_dictionaries({"type": st.just("transcription"), "audio": st.fixed_dictionaries(
    {"input": st.fixed_dictionaries({}, optional={
        "format": st.fixed_dictionaries({"type": st.just("audio/pcm"), "rate": st.sampled_from(RATES)}),
        "transcription": valid_transcription, "turn_detection": valid_turns, "noise_reduction": values})})},
    optional={"include": st.sampled_from([[], ["item.input_audio_transcription.logprobs"], None]),
              "susurrus": valid_extension})
valid_beta = st.fixed_dictionaries({}, optional={
    "input_audio_format": st.just("pcm16"), "input_audio_transcription": valid_transcription,
    "turn_detection": valid_turns, "include": st.sampled_from([[], None]), "susurrus": valid_extension})


@st.composite
def session_updates(draw: Any, turns: bool = True) -> dict[str, Any]:
    """An update: valid with extreme values (about half), or with anything anywhere."""
    kind = draw(st.sampled_from(["session.update", "transcription_session.update"]))
    session = draw(st.one_of(valid_ga, valid_beta, ga_session, beta_session, ga_session, values))
    event: dict[str, Any] = {"type": kind}
    if draw(st.sampled_from([True] * 9 + [False])):
        event["session"] = session
    if not turns and isinstance(session, dict):  # the server runs keep the client's commits
        for holder in (session, (session.get("audio") or {}).get("input") if isinstance(session.get("audio"),
                                                                                         dict) else None):
            if isinstance(holder, dict) and "turn_detection" in holder:
                holder["turn_detection"] = None
    return event


PCM_SHAPES = ["noise", "loud", "max", "min", "nyquist", "dc", "zeros", "sine", "full_random"]


def pcm_of(shape: str, n: int, seed: int) -> np.ndarray:
    """``n`` int16 samples: quiet noise, speech-loud noise, or the out-of-range edges (constant
    +32767 or -32768, a full-scale square at Nyquist, DC, white noise over the full int16 range)."""
    rng = np.random.default_rng(seed)
    if shape == "noise":
        return (rng.standard_normal(n) * 300).astype(np.int16)
    if shape == "loud":
        return np.clip(rng.standard_normal(n) * 8000, -32768, 32767).astype(np.int16)
    if shape == "max":
        return np.full(n, 32767, np.int16)
    if shape == "min":
        return np.full(n, -32768, np.int16)
    if shape == "nyquist":
        return np.where(np.arange(n) % 2 == 0, 32767, -32768).astype(np.int16)
    if shape == "dc":
        return np.full(n, 12000, np.int16)
    if shape == "zeros":
        return np.zeros(n, np.int16)
    if shape == "sine":
        return (np.sin(np.arange(n) * 2 * np.pi * 440 / 24000) * 20000).astype(np.int16)
    return rng.integers(-32768, 32768, n).astype(np.int16)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@st.composite
def appends(draw: Any, max_samples: int = 24000, huge: int = 0) -> dict[str, Any]:
    """An ``input_audio_buffer.append``: valid PCM of any length and shape (tiny, empty, full
    scale), or broken audio (not base64, an odd byte count, whitespace, the URL-safe alphabet,
    missing padding, a data: URI, not a string, no audio at all); ``huge``: sometimes that many
    samples (over the message limit)."""
    how = draw(st.sampled_from(["pcm"] * 6 + ["text", "odd", "newline", "urlsafe", "unpadded", "data_uri",
                                             "not_str", "missing"] + (["huge"] if huge else [])))
    event: dict[str, Any] = {"type": "input_audio_buffer.append"}
    if draw(st.booleans()):
        event["event_id"] = draw(maybe(st.text(max_size=10)))
    if how == "missing":
        return event
    if how == "not_str":
        event["audio"] = draw(values.filter(lambda v: not isinstance(v, str)))
        return event
    n = draw(st.sampled_from([0, 1, 2, 3, 240, 2400, max_samples]) | st.integers(0, max_samples))
    if how == "huge":
        n = huge
    pcm = pcm_of(draw(st.sampled_from(PCM_SHAPES)), n, draw(st.integers(0, 2**16)))
    raw = pcm.astype("<i2").tobytes()
    if how in ("pcm", "huge"):
        event["audio"] = b64(raw)
    elif how == "text":
        event["audio"] = draw(st.text(min_size=1, max_size=40))
    elif how == "odd":
        event["audio"] = b64(raw + b"\x01")
    elif how == "newline":
        text = b64(raw + b"\x00\x00\x00\x00")
        cut = draw(st.integers(0, len(text)))
        event["audio"] = text[:cut] + draw(st.sampled_from(["\n", " ", "\t", "\r\n"])) + text[cut:]
    elif how == "urlsafe":
        event["audio"] = base64.urlsafe_b64encode(b"\xfb\xff" * (n + 1)).decode()
    elif how == "unpadded":
        event["audio"] = b64(raw + b"\x00\x00").rstrip("=") + ("" if len(raw) % 3 == 1 else "A")
    else:
        event["audio"] = "data:audio/pcm;base64," + b64(raw)
    return event


OTHER_TYPES = ["conversation.item.create", "conversation.item.retrieve", "conversation.item.delete",
               "conversation.item.truncate", "response.create", "response.cancel", "output_audio_buffer.clear",
               "input_audio_buffer.explode", "session.create", "session.updated", "transcription_session.create",
               "", " input_audio_buffer.commit", "INPUT_AUDIO_BUFFER.COMMIT", "input_audio_buffer", "error"]


@st.composite
def other_events(draw: Any) -> dict[str, Any]:
    """conversation.item.*, response.*, unknown types, and types that are not strings."""
    event: dict[str, Any] = {"type": draw(maybe(st.sampled_from(OTHER_TYPES) | st.text(max_size=30)))}
    if draw(st.booleans()):
        event["item"] = draw(values)
    if draw(st.booleans()):
        event["event_id"] = draw(maybe(st.text(max_size=10)))
    return event


@st.composite
def buffer_events(draw: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": draw(st.sampled_from(["input_audio_buffer.commit", "input_audio_buffer.clear"]))}
    for key in draw(st.lists(st.sampled_from(["event_id", "item_id", "audio"]), max_size=2)):
        event[key] = draw(values)
    return event


def _dumps(event: Any) -> str:
    return json.dumps(event)  # NaN and Infinity as Python writes them (not strict JSON: a client may)


@st.composite
def non_json(draw: Any, max_bytes: int) -> Step:
    """Text that is not a JSON object, or JSON a parser may choke on."""
    how = draw(st.sampled_from(["text", "truncated", "array", "scalar", "deep", "big_int", "big_float", "empty",
                                "bom", "dup_keys", "too_large", "binary", "binary_json"]))
    if how == "text":
        return Step("text", draw(st.text(max_size=60)), "text.garbage")
    if how == "truncated":
        text = _dumps(draw(st.one_of(session_updates(), appends(max_samples=240), other_events())))
        return Step("text", text[:draw(st.integers(0, max(0, len(text) - 1)))], "text.truncated")
    if how == "array":
        return Step("text", _dumps(draw(st.lists(values, max_size=3))), "text.array")
    if how == "scalar":
        return Step("text", _dumps(draw(scalars)), "text.scalar")
    if how == "deep":
        depth = draw(st.sampled_from([50, 1000, 100_000]))
        return Step("text", "[" * depth + "]" * depth if draw(st.booleans()) else '{"a":' * depth + "1"
                    + "}" * depth, "text.deep")
    if how == "big_int":
        digits = draw(st.sampled_from([20, 4300, 4301, 10_000]))
        key = draw(st.sampled_from(["type", "event_id", "audio", "x"]))
        return Step("text", f'{{"type": "input_audio_buffer.commit", "{key}": {"9" * digits}}}', "text.big_int")
    if how == "big_float":
        return Step("text", '{"type": "session.update", "session": {"susurrus": {"chunk_ms": 1e999}}}',
                    "text.big_float")
    if how == "empty":
        return Step("text", draw(st.sampled_from(["", " ", "\n", "null", "{}", '{"type": null}'])), "text.empty")
    if how == "bom":
        return Step("text", '\ufeff{"type": "input_audio_buffer.commit"}', "text.bom")
    if how == "dup_keys":
        return Step("text", '{"type": "input_audio_buffer.clear", "type": "input_audio_buffer.explode"}',
                    "text.dup_keys")
    if how == "too_large":
        return Step("text", _dumps({"type": "input_audio_buffer.append", "audio": "A" * (max_bytes + 4)}),
                    "text.too_large")
    if how == "binary":
        return Step("bytes", draw(st.binary(max_size=64)), "binary")
    return Step("bytes", _dumps({"type": "input_audio_buffer.commit"}).encode(), "binary.json")


def _label(event: dict[str, Any]) -> str:
    kind = event.get("type")
    return kind if isinstance(kind, str) and kind in ("session.update", "transcription_session.update",
                                                     "input_audio_buffer.append", "input_audio_buffer.commit",
                                                     "input_audio_buffer.clear") else "other"


@st.composite
def single_steps(draw: Any, max_bytes: int, max_samples: int = 24000, turns: bool = True,
                 buffer: bool = True) -> Step:
    """Any one client frame."""
    choices = [session_updates(turns=turns), appends(max_samples=max_samples, huge=max_bytes // 2),
               appends(max_samples=max_samples), other_events()]
    if buffer:
        choices += [buffer_events(), buffer_events()]
    kind = draw(st.integers(0, len(choices)))
    if kind == len(choices):
        return draw(non_json(max_bytes))
    event = draw(choices[kind])
    return Step("text", _dumps(event), _label(event))


# ---------------------------------------------------------------------------- mutations of a real session


def real_session(rate: int = 24000, blocks: int = 4, block: int = 2400, seed: int = 0) -> list[str]:
    """The messages ``susurrus client`` sends: ``session.update``, appends, commit (then more audio
    and a clear)."""
    pcm = pcm_of("loud", blocks * block, seed)
    messages = [_dumps(session_update(rate, latency="medium"))]
    messages += [_dumps(append_event(pcm[i:i + block], f"a{i}")) for i in range(0, len(pcm), block)]
    messages += [_dumps({"type": "input_audio_buffer.commit", "event_id": "c1"}),
                 _dumps(append_event(pcm[:block], "late")), _dumps({"type": "input_audio_buffer.clear"})]
    return messages


def _set_path(obj: Any, path: list[Any], value: Any, delete: bool) -> None:
    for key in path[:-1]:
        obj = obj[key]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def _paths(obj: Any, prefix: tuple = ()) -> list[list[Any]]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append([*prefix, k])
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append([*prefix, i])
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutate_message(draw: Any, text: str) -> Step:
    """One real message, mutated: a field set to anything or removed, a character changed, cut short."""
    how = draw(st.sampled_from(["field", "field", "delete", "char", "cut", "as_bytes"]))
    if how in ("field", "delete"):
        event = json.loads(text)
        paths = _paths(event)
        path = draw(st.sampled_from(paths))
        _set_path(event, path, draw(values), how == "delete")
        return Step("text", _dumps(event), "mutated." + how)
    if how == "char":
        i = draw(st.integers(0, len(text) - 1))
        return Step("text", text[:i] + draw(st.characters()) + text[i + 1:], "mutated.char")
    if how == "cut":
        return Step("text", text[:draw(st.integers(0, len(text) - 1))], "mutated.cut")
    return Step("bytes", text.encode(), "mutated.bytes")


@st.composite
def mutated_sessions(draw: Any, max_bytes: int, max_samples: int = 24000, turns: bool = True) -> list[Step]:
    """A real session's messages with random mutations: some mutated, dropped, duplicated, swapped,
    and random frames inserted anywhere."""
    rate = draw(st.sampled_from([24000, 16000]))
    steps = [Step("text", m, "real") for m in real_session(rate, seed=draw(st.integers(0, 99)))]
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["mutate", "mutate", "insert", "insert", "drop", "dup", "swap"]))
        i = draw(st.integers(0, len(steps) - 1))
        if op == "mutate" and steps[i].kind == "text" and steps[i].label == "real":
            steps[i] = draw(mutate_message(steps[i].payload))
        elif op == "insert":
            steps.insert(i, draw(single_steps(max_bytes, max_samples, turns)))
        elif op == "drop" and len(steps) > 1:
            del steps[i]
        elif op == "dup":
            steps.insert(i, steps[i])
        elif op == "swap" and i + 1 < len(steps):
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
    return steps


def protocol_cases(max_bytes: int, max_steps: int = 14, max_samples: int = 24000, turns: bool = True
                   ) -> st.SearchStrategy:
    """Random sequences of client frames, or a real session's messages mutated."""
    return st.one_of(st.lists(single_steps(max_bytes, max_samples, turns), min_size=1, max_size=max_steps),
                     mutated_sessions(max_bytes, max_samples, turns))


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
            if n is None:
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
    :class:`~susurrus.transports.realtime_transcriber.Transcriber`, in order, as the server's
    worker does (turn signals back into the session). Checks the model's side: nothing fails,
    every commit completes its item with all its accepted audio, every clear is answered."""
    from susurrus.transports.realtime_transcriber import Transcriber

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


# ---------------------------------------------------------------------------- the REST upload


FIELDS = ["model", "language", "prompt", "temperature", "response_format", "timestamp_granularities[]", "stream"]
field_values = {
    "model": st.sampled_from(["whisper-1", "tiny.en", "gpt-4o-transcribe", "base", "", "whisper-2"]),
    "language": st.sampled_from(["en", "English", "de", "", "xx", " EN ", "zh"]),
    "prompt": st.sampled_from(["", "Sweynheim.", "word " * 2000]),
    "temperature": st.sampled_from(["0", "0.2", "1", "1.0001", "-0", "nan", "inf", "-inf", "1e999", "0x1", "", "½"]),
    "response_format": st.sampled_from(["json", "text", "srt", "vtt", "verbose_json", "xml", "", "JSON"]),
    "timestamp_granularities[]": st.sampled_from(["word", "segment", "char", ""]),
    "stream": st.sampled_from(["true", "false", "1", "0", "yes", "", "TRUE"]),
}


@st.composite
def form_cases(draw: Any) -> list[tuple[str, Any]]:
    """Multipart fields: any subset of the documented ones with sensible, extreme or random text
    values (sometimes repeated, sometimes a file where text belongs), plus unknown fields."""
    fields: list[tuple[str, Any]] = []
    for name in draw(st.lists(st.sampled_from(FIELDS + ["file", "x"]), max_size=6)):
        if name == "file" or draw(st.integers(0, 9)) == 0:
            fields.append((name, ("file", draw(st.binary(max_size=16)))))
        else:
            fields.append((name, draw(st.one_of(field_values.get(name, st.text(max_size=8)), st.text(max_size=12)))))
    return fields


def wav_bytes(pcm: np.ndarray, rate: int = 16000, channels: int = 1, bits: int = 16, fmt: int = 1,
              declared: int | None = None) -> bytes:
    """A RIFF/WAVE file with any header values (the data as given)."""
    data = pcm.tobytes()
    size = len(data) if declared is None else declared
    block = channels * bits // 8
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", (36 + size) & 0xFFFFFFFF, b"WAVE", b"fmt ", 16, fmt,
                         channels & 0xFFFF, rate & 0xFFFFFFFF, (rate * block) & 0xFFFFFFFF, block & 0xFFFF,
                         bits & 0xFFFF, b"data", size & 0xFFFFFFFF)
    return header + data


@st.composite
def upload_bytes(draw: Any) -> bytes:
    """An upload's bytes: random, a valid short WAV (quiet, full scale, float with NaN or Inf
    samples), a WAV with a broken or lying header, truncated, or other magic numbers."""
    how = draw(st.sampled_from(["random", "wav", "float_wav", "bad_header", "truncated", "magic", "tiny"]))
    n = draw(st.sampled_from([0, 1, 800, 1600, 4000]))
    pcm = pcm_of(draw(st.sampled_from(PCM_SHAPES)), n, draw(st.integers(0, 999)))
    if how == "random":
        return draw(st.binary(max_size=256))
    if how == "wav":
        return wav_bytes(pcm, draw(st.sampled_from([8000, 16000, 44100, 48000])))
    if how == "float_wav":
        x = pcm.astype(np.float32) / 32768
        if n:
            x[draw(st.integers(0, n - 1))] = draw(st.sampled_from([math.nan, math.inf, -math.inf, 1e30]))
        return wav_bytes(x.astype("<f4"), bits=32, fmt=3)
    if how == "bad_header":
        return wav_bytes(pcm, rate=draw(st.sampled_from([0, 1, 16000, 2**31, 2**32 - 1])),
                         channels=draw(st.sampled_from([0, 1, 2, 255, 65535])),
                         bits=draw(st.sampled_from([0, 7, 8, 16, 24, 32, 64, 65535])),
                         fmt=draw(st.sampled_from([0, 1, 3, 2, 85, 65534, 65535])),
                         declared=draw(st.sampled_from([None, 0, 1, 2**31, 2**32 - 1])))
    if how == "truncated":
        data = wav_bytes(pcm)
        return data[:draw(st.integers(0, len(data)))]
    if how == "magic":
        return draw(st.sampled_from([b"fLaC", b"OggS", b"ID3", b"\xff\xfb", b"RIFF", b"\x1aE\xdf\xa3"])) + \
            draw(st.binary(max_size=64))
    return wav_bytes(pcm[:draw(st.integers(0, 3))])


def run_form(fields: list[tuple[str, Any]], model: Any) -> CaseResult:
    """The form checked by ``rest.parse_request`` (no socket): an ``AudioRequest`` or a
    ``RestError`` with a 4xx status, a documented code and OpenAI's body, never another exception."""
    from starlette.datastructures import FormData, Headers, UploadFile

    from susurrus.transports.rest import parse_request
    from susurrus.transports.rest_jobs import RestError

    t0 = time.monotonic()
    result = CaseResult(steps=1)
    items = [(k, UploadFile(io.BytesIO(v[1]), filename=v[0], headers=Headers({})) if isinstance(v, tuple) else v)
             for k, v in fields]
    for task in ("transcribe", "translate"):
        try:
            parse_request(FormData(items), task, model)
        except RestError as err:
            result.errors[err.code] += 1
            result.violations += check_rest_error(err.status, err.body())
        except Exception as err:  # noqa: BLE001
            result.crashes.append(f"parse_request raised {type(err).__name__}: {err} on {fields!r:.200}")
    result.wall_s = time.monotonic() - t0
    return result


def check_rest_error(status: int, body: Any) -> list[str]:
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or set(err) != {"message", "type", "param", "code"}:
        return [f"{status}: not OpenAI's error body: {body!r:.200}"]
    out = []
    if not 400 <= status < 500:
        out.append(f"a refusal with status {status}: {err}")
    if err["code"] not in REST_CODES:
        out.append(f"undocumented code {err['code']!r} ({status}): {err['message']}")
    if not err["message"]:
        out.append(f"an error without a message: {err}")
    return out


def run_upload(data: bytes, limits: Any) -> CaseResult:
    """``rest_jobs.decode_upload`` on ``data``: finite 16 kHz samples of 0.1 s or more within the
    limit, or a 400 with a documented code; never another exception."""
    from susurrus.transports.rest_jobs import RestError, decode_upload

    t0 = time.monotonic()
    result = CaseResult(steps=1)
    try:
        samples = decode_upload(data, limits)
    except RestError as err:
        result.errors[err.code] += 1
        result.violations += check_rest_error(err.status, err.body())
    except Exception as err:  # noqa: BLE001
        result.crashes.append(f"decode_upload raised {type(err).__name__}: {err} on {data[:48]!r}")
    else:
        if samples.dtype != np.float32 or samples.ndim != 1:
            result.violations.append(f"decoded to {samples.dtype} {samples.shape}")
        elif not np.isfinite(samples).all():
            result.violations.append(f"decoded to non-finite samples ({int((~np.isfinite(samples)).sum())} of "
                                     f"{len(samples)}): the model would read NaN")
        elif not limits.max_seconds * SAMPLE_RATE >= len(samples) >= 0.1 * SAMPLE_RATE:
            result.violations.append(f"decoded {len(samples) / SAMPLE_RATE:.3f} s, outside the limits")
    result.wall_s = time.monotonic() - t0
    return result


def multipart(fields: list[tuple[str, Any]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = io.BytesIO()
    for name, value in fields:
        out.write(f"--{boundary}\r\n".encode())
        if isinstance(value, tuple):
            out.write(f'Content-Disposition: form-data; name="{name}"; filename="{value[0]}"\r\n'
                      "Content-Type: application/octet-stream\r\n\r\n".encode())
            out.write(value[1])
        else:
            out.write(f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode())
            out.write(value.encode())
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def run_rest(fields: list[tuple[str, Any]], data: bytes | None, http_url: str, bound_s: float = 120.0
             ) -> CaseResult:
    """One ``POST /v1/audio/transcriptions`` to the real server: 200 or a 4xx with OpenAI's body
    and a documented code, within ``bound_s``; the open-requests gauge back to 0."""
    t0 = time.monotonic()
    result = CaseResult(steps=1)
    fields = [(k, v) for k, v in fields if k != "file"] + ([("file", ("audio.wav", data))] if data is not None else [])
    body, ctype = multipart(fields)
    req = urllib.request.Request(f"{http_url}/v1/audio/transcriptions", data=body, method="POST",
                                 headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=bound_s) as r:
            status, answer = r.status, r.read()
    except urllib.error.HTTPError as err:
        status, answer = err.code, err.read()
    except TimeoutError:
        result.hangs.append(f"no answer within {bound_s:.0f} s to {fields!r:.200}")
        return result
    result.events += 1
    if status != 200:
        try:
            parsed = json.loads(answer)
        except ValueError:
            parsed = answer[:200]
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            result.errors[parsed["error"].get("code")] += 1
        (result.crashes if status >= 500 else result.violations).extend(check_rest_error(status, parsed))
    deadline = time.monotonic() + bound_s
    while metric(http_url, "susurrus_http_requests_open") != 0:
        if time.monotonic() > deadline:
            result.hangs.append("http_requests_open did not return to 0")
            break
        time.sleep(0.05)
    result.wall_s = time.monotonic() - t0
    return result
