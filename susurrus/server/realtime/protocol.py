"""The Realtime protocol's messages: a client message parsed and checked (a client mistake is a
:class:`ProtocolError`, sent back as an ``error`` event and counted; the session goes on), server
events built, and the ``error.code`` values."""

from __future__ import annotations

import base64
import binascii
import json
import math
import secrets
from typing import Any

import numpy as np

# error codes (``error.code``); OpenAI's where it has one
INVALID_JSON = "invalid_json"
UNKNOWN_EVENT = "unknown_event_type"
UNSUPPORTED_EVENT = "unsupported_event"
INVALID_VALUE = "invalid_value"
MISSING_PARAM = "missing_required_parameter"
INVALID_AUDIO = "invalid_audio"
UNSUPPORTED_FORMAT = "unsupported_audio_format"
UNSUPPORTED_RATE = "unsupported_sample_rate"
FORMAT_LOCKED = "format_change_with_buffered_audio"
COMMIT_EMPTY = "input_audio_buffer_commit_empty"
TURNS_LOCKED = "turn_detection_change_with_buffered_audio"
MESSAGE_TOO_LARGE = "message_too_large"
BINARY_FRAME = "binary_frame_not_supported"
INVALID_API_KEY = "invalid_api_key"
SESSION_LIMIT = "session_limit_reached"
SERVER_OVERLOADED = "server_overloaded"
TRANSCRIPTION_FAILED = "transcription_failed"
ORIGIN_NOT_ALLOWED = "origin_not_allowed"
SERVER_SHUTTING_DOWN = "server_shutting_down"
IDLE_TIMEOUT = "idle_timeout"
SESSION_EXPIRED = "session_expired"
CLIENT_TOO_SLOW = "client_too_slow"
BACKLOG_FULL = "input_audio_backlog_full"

# WebSocket close codes the server uses (RFC 6455 section 7.4; 1012 is IANA's "service restart")
CLOSE_NORMAL = 1000  # idle timeout, --max-session-s
CLOSE_POLICY = 1008  # bad API key; a client that stopped reading its events
CLOSE_TRY_AGAIN = 1013  # too many sessions
CLOSE_RESTART = 1012  # the server is shutting down (refused during the drain, or closed at its end)


class ProtocolError(Exception):
    """A client mistake, reported as an ``error`` event; the session goes on."""

    def __init__(self, code: str, message: str, param: str | None = None,
                 type: str = "invalid_request_error", event_id: str | None = None):
        super().__init__(message)
        self.code, self.message, self.param, self.type, self.event_id = code, message, param, type, event_id


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def server_event(type: str, **fields: Any) -> dict[str, Any]:
    return {"type": type, "event_id": new_id("event"), **fields}


def error_event(err: ProtocolError) -> dict[str, Any]:
    return server_event("error", error={"type": err.type, "code": err.code, "message": err.message,
                                        "param": err.param, "event_id": err.event_id})


def _not_a_number(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """JSON numbers are finite (RFC 8259): ``NaN``, ``Infinity`` and ``1e999`` are refused, so no
    value a client gives (kept as given in ``turn_detection``, say) comes back as invalid JSON."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is out of range for a JSON number")
    return value


def parse_client_event(data: str | bytes | None, max_bytes: int) -> dict[str, Any]:
    """One WebSocket message to an event dict, or :class:`ProtocolError`."""
    if data is None:
        raise ProtocolError(INVALID_JSON, "empty message")
    if isinstance(data, (bytes, bytearray)):
        raise ProtocolError(BINARY_FRAME, "binary WebSocket frames are not part of the protocol: send JSON "
                                          "text events (audio goes base64 in input_audio_buffer.append)")
    if len(data) > max_bytes:
        raise ProtocolError(MESSAGE_TOO_LARGE, f"message of {len(data)} bytes exceeds the limit of {max_bytes} "
                                               "bytes; split the audio into smaller appends")
    try:
        event = json.loads(data, parse_constant=_not_a_number, parse_float=_finite_float)
    except (ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, and an integer of more
        # than Python's 4300 digits (``int_max_str_digits``), which json.loads refuses with a plain one
        raise ProtocolError(INVALID_JSON, f"message is not valid JSON: {err}") from None
    if not isinstance(event, dict):
        raise ProtocolError(INVALID_JSON, f"an event must be a JSON object, not {type(event).__name__}")
    event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
    if not isinstance(event.get("type"), str):
        raise ProtocolError(MISSING_PARAM, "an event needs a string 'type'", "type", event_id=event_id)
    return event


def decode_pcm16(audio: Any) -> np.ndarray:
    """Base64 PCM16 little-endian mono to int16 samples."""
    if not isinstance(audio, str):
        raise ProtocolError(MISSING_PARAM, "input_audio_buffer.append needs 'audio': base64 PCM16 mono", "audio")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ProtocolError(INVALID_AUDIO, f"'audio' is not valid base64: {err}", "audio") from None
    if len(raw) % 2:
        raise ProtocolError(INVALID_AUDIO, f"'audio' decodes to {len(raw)} bytes, an odd count: PCM16 has two "
                                           "bytes per sample", "audio")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)
