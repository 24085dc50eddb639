"""The fuzzer's cases: what a case is (:class:`Step`, :class:`CaseResult`), the hostile values,
client events and frames Hypothesis draws, and a real session's messages mutated. The runners
are in ``fuzz_realtime.py`` and ``fuzz_rest.py``; ``protocol_fuzz.py`` says how it fits."""

from __future__ import annotations

import base64
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from susurrus.client import append_event, session_update
from susurrus.server.realtime import protocol as rp

# every error.code the realtime protocol documents (docs/architecture.md, "Limits and errors")
REALTIME_CODES = {rp.INVALID_JSON, rp.UNKNOWN_EVENT, rp.UNSUPPORTED_EVENT, rp.INVALID_VALUE, rp.MISSING_PARAM,
                  rp.INVALID_AUDIO, rp.UNSUPPORTED_FORMAT, rp.UNSUPPORTED_RATE, rp.FORMAT_LOCKED, rp.COMMIT_EMPTY,
                  rp.TURNS_LOCKED, rp.MESSAGE_TOO_LARGE, rp.BINARY_FRAME, rp.BACKLOG_FULL}
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
