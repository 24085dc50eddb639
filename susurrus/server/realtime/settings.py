"""A session's settings: ``session.update`` / ``transcription_session.update`` (GA and beta
shapes) read into :class:`SessionSettings`, all or nothing; ``turn_detection`` checked and mapped
onto the stream's turn detection; the session as ``session.created`` / ``updated`` report it;
and the server's per-session :class:`Limits`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from susurrus.server.realtime.diarization import SPEAKER_KEYS, parse_diarization
from susurrus.server.realtime.protocol import (
    FORMAT_LOCKED,
    INVALID_VALUE,
    MISSING_PARAM,
    UNSUPPORTED_FORMAT,
    UNSUPPORTED_RATE,
    ProtocolError,
)
from susurrus.speakers.settings import Diarization
from susurrus.streaming.session import StreamConfig, stream_config
from susurrus.streaming.vad import TurnConfig

DEFAULT_RATE = 24000  # OpenAI's PCM rate: what a client sends unless it says otherwise
# 16 and 24 kHz are the issue's; the other common rates are an extension (a browser's native rate)
SUPPORTED_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
# OpenAI's ``transcription.delay`` onto the latency presets
DELAY_TO_PRESET = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
LATENCIES = ("low", "medium", "high")
# OpenAI's server_vad defaults
SERVER_VAD_DEFAULTS = {"threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
# OpenAI's realtime-only transcription models: no server turn detection (they refuse ``turn_detection``)
CLIENT_COMMIT_MODELS = ("gpt-realtime-whisper", "gpt-live-transcribe")
# semantic_vad ``eagerness`` onto the silence that ends a turn whose text reads as neither finished nor
# trailing off; the stream takes 0.7x of it after a sentence end the decoder is sure of and doubles it
# when the text trails off (``streaming.vad.text_turn_silence_ms``)
EAGERNESS_SILENCE_MS = {"low": 1000, "medium": 500, "auto": 500, "high": 250}


@dataclass(frozen=True)
class Limits:
    """Per-server bounds. ``max_buffered_s``: audio accepted but not yet transcribed, per session,
    held in memory as the client's PCM16 (2.9 MB a minute at 24 kHz). The server reads every
    message as it comes, so a client's keepalive pings are answered however far behind the model
    is, and a client that sends a whole recording at once gets all of it transcribed; past the
    bound appends are refused (``input_audio_backlog_full``, once per run of refused appends).
    The default, 30 minutes (86 MB at 24 kHz, 173 MB at 48 kHz; at most 16 such sessions: 1.4 GB),
    holds a voice note, a call or a lecture sent at once; a client sending at real-time pace
    holds a few seconds.

    ``max_outbound_bytes``: server events queued for a client that does not read them, beyond
    what its socket holds; past it the session is closed (1008, the queue freed). A session
    sends a few KB of events per second of audio, so the default 1 MiB is minutes of unread
    events: only a client that stopped reading reaches it, and 16 sessions hold 16 MiB at most.
    ``idle_s``: no client message and no work for the model for this long closes the session
    (1000); a live client sends audio every 20-100 ms, even in silence, so 300 s catches only
    clients that went away without closing (a suspended laptop, a tab left open) and gives their
    slot of ``max_sessions`` back. ``max_session_s``: a session this old is ended like a
    shutdown (its open item committed and completed, then 1000); 0, the default, is no limit: a
    live-captioning session may run for hours at bounded memory. 0 turns either timer off.
    ``overload_lag_s``: new sessions are refused (``server_overloaded``, 1013) while the median
    open session of a client sending at real-time pace has more than this much accepted audio
    waiting for the model: the model is falling behind real time, and one more stream would slow
    every stream further (0: never). Clients that send faster than real time (a file at once)
    are left out: their backlog is their own."""

    max_message_bytes: int = 1 << 20
    max_buffered_s: float = 1800.0
    max_sessions: int = 16
    max_outbound_bytes: int = 1 << 20
    idle_s: float = 300.0
    max_session_s: float = 0.0
    overload_lag_s: float = 1.5


@dataclass(frozen=True)
class SessionSettings:
    """A session's effective configuration (what ``session.updated`` reports)."""

    rate: int = DEFAULT_RATE
    model: str | None = None  # the model the client asked for (reported, not used: the server has one)
    language: str | None = None
    prompt: str = ""
    delay: str | None = None
    # OpenAI's default for a transcription session: server VAD with its documented defaults (a
    # client that never sends ``turn_detection`` gets its turns committed; only ``null`` turns it
    # off). ``turn_detection_set``: the client chose it; until then the default follows the model
    # it names (:func:`default_turn_detection`)
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: default_turn_detection())
    turn_detection_set: bool = False
    include: tuple[str, ...] = ()
    latency: str = "medium"
    chunk_ms: int | None = None
    lookahead_ms: int | None = None
    diarization: Diarization | None = None  # susurrus.diarize: speaker labels (speakers/)

    @property
    def server_turns(self) -> bool:
        """Turn detection by the server (``server_vad`` or ``semantic_vad``)."""
        return self.turn_detection is not None

    def stream_config(self) -> StreamConfig:
        cfg = stream_config(self.latency, chunk_ms=self.chunk_ms, lookahead_ms=self.lookahead_ms,
                            language=self.language, prompt=self.prompt or None, diarization=self.diarization)
        if self.turn_detection is None:
            return cfg
        turns, semantic = turn_config(self.turn_detection)
        # the compute gate hears speech where turns do: no words outside a turn
        return replace(cfg, turns=turns, semantic_turns=semantic,
                       vad_threshold=min(0.99, max(0.01, turns.threshold)))


def default_turn_detection(model: str | None = None) -> dict[str, Any] | None:
    """OpenAI's ``turn_detection`` for a transcription session that never set it: ``server_vad``
    with its documented defaults, except for the realtime-only models
    (:data:`CLIENT_COMMIT_MODELS`), which have no server endpointing: their clients commit
    (LiveKit's plugin, say, leaves ``turn_detection`` out for them and commits on its own VAD)."""
    if model is not None and model.startswith(CLIENT_COMMIT_MODELS):
        return None
    return {"type": "server_vad", **SERVER_VAD_DEFAULTS}


def _object(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(INVALID_VALUE, f"'{param}' must be an object", param)
    return value


def _rate_of_format(fmt: Any, param: str) -> int:
    """GA ``{type: "audio/pcm", rate}`` or beta ``"pcm16"`` to a sample rate."""
    if isinstance(fmt, str):  # beta
        if fmt == "pcm16":
            return DEFAULT_RATE
        raise ProtocolError(UNSUPPORTED_FORMAT, f"input audio format {fmt!r} is not supported; use 'pcm16' "
                                                "(PCM16 LE mono, 24 kHz)", param)
    fmt = _object(fmt, param)
    kind = fmt.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise ProtocolError(UNSUPPORTED_FORMAT, f"input audio format {kind!r} is not supported; use 'audio/pcm' "
                                                "(PCM16 LE mono)", f"{param}.type")
    rate = fmt.get("rate", DEFAULT_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in SUPPORTED_RATES:
        raise ProtocolError(UNSUPPORTED_RATE, f"sample rate {rate!r} is not supported; use 24000 (OpenAI's) or "
                                              f"16000 (also accepted: {', '.join(map(str, SUPPORTED_RATES))})",
                            f"{param}.rate")
    return rate


def apply_update(settings: SessionSettings, event: dict[str, Any], *, multilingual: bool,
                 buffered_audio: bool) -> SessionSettings:
    """The settings after a ``session.update`` / ``transcription_session.update``; all or nothing.

    Reads both shapes in either event: GA ``session.audio.input.*`` and the beta flat fields.
    ``susurrus: {latency, chunk_ms, lookahead_ms}`` is the extension; OpenAI's
    ``transcription.delay`` (minimal/low/medium/high/xhigh) maps onto the presets when no
    ``susurrus.latency`` is given."""
    s = _object(event.get("session"), "session")
    if "session" not in event:
        raise ProtocolError(MISSING_PARAM, f"{event['type']} needs a 'session' object", "session")
    kind = s.get("type")
    if kind is not None and kind != "transcription":
        raise ProtocolError(INVALID_VALUE, f"session.type {kind!r} is not supported: this server transcribes only "
                                           "(use \"transcription\")", "session.type")
    changes: dict[str, Any] = {}
    audio_input = _object(_object(s.get("audio"), "session.audio").get("input"), "session.audio.input")
    # format
    if "format" in audio_input:
        changes["rate"] = _rate_of_format(audio_input["format"], "session.audio.input.format")
    if "input_audio_format" in s:
        changes["rate"] = _rate_of_format(s["input_audio_format"], "session.input_audio_format")
    if "rate" in changes and changes["rate"] != settings.rate and buffered_audio:
        raise ProtocolError(FORMAT_LOCKED, "the input sample rate cannot change while the buffer holds uncommitted "
                                           "audio: commit or clear it first", "session.audio.input.format")
    # transcription settings
    for key, param in (("transcription", "session.audio.input.transcription"),
                       ("input_audio_transcription", "session.input_audio_transcription")):
        src = audio_input if key == "transcription" else s
        if key not in src:
            continue
        t = _object(src[key], param)
        if "model" in t:
            changes["model"] = t["model"] if isinstance(t["model"], str) else None
        if "language" in t:
            lang = t["language"]
            if lang is not None and not isinstance(lang, str):
                raise ProtocolError(INVALID_VALUE, "language must be a string (ISO-639-1) or null",
                                    f"{param}.language")
            if lang and not multilingual and lang != "en":
                raise ProtocolError(INVALID_VALUE, f"language {lang!r} is not available: the server's model is "
                                                   "English-only", f"{param}.language")
            changes["language"] = lang or None
        if "prompt" in t:
            changes["prompt"] = t["prompt"] if isinstance(t["prompt"], str) else ""
        if "delay" in t and t["delay"] is not None:
            if not isinstance(t["delay"], str) or t["delay"] not in DELAY_TO_PRESET:  # a list is unhashable
                raise ProtocolError(INVALID_VALUE, f"delay must be one of {', '.join(DELAY_TO_PRESET)}",
                                    f"{param}.delay")
            changes["delay"] = t["delay"]
            changes["latency"] = DELAY_TO_PRESET[t["delay"]]
    # turn detection
    for src, param in ((audio_input, "session.audio.input.turn_detection"), (s, "session.turn_detection")):
        if "turn_detection" in src:
            changes["turn_detection"] = parse_turn_detection(src["turn_detection"], param)
            changes["turn_detection_set"] = True
    if not settings.turn_detection_set and "turn_detection" not in changes and "model" in changes:
        changes["turn_detection"] = default_turn_detection(changes["model"])  # the default follows the model
    if "include" in s:
        inc = s["include"]
        if inc is not None and not (isinstance(inc, list) and all(isinstance(x, str) for x in inc)):
            raise ProtocolError(INVALID_VALUE, "include must be a list of strings", "session.include")
        changes["include"] = tuple(inc or ())
    # the extension
    ext = _object(s.get("susurrus"), "session.susurrus")
    if "latency" in ext:
        if ext["latency"] not in LATENCIES:
            raise ProtocolError(INVALID_VALUE, f"susurrus.latency must be one of {', '.join(LATENCIES)}",
                                "session.susurrus.latency")
        changes["latency"] = ext["latency"]
    for key in ("chunk_ms", "lookahead_ms"):
        if key in ext:
            v = ext[key]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ProtocolError(INVALID_VALUE, f"susurrus.{key} must be an integer (ms) or null",
                                    f"session.susurrus.{key}")
            changes[key] = v
    if any(k in ext for k in SPEAKER_KEYS):
        changes["diarization"] = parse_diarization(ext, settings.diarization)
    updated = replace(settings, **changes)
    try:
        updated.stream_config()
    except ValueError as err:
        raise ProtocolError(INVALID_VALUE, str(err), "session.susurrus") from None
    return updated


def parse_turn_detection(value: Any, param: str) -> dict[str, Any] | None:
    """A client's ``turn_detection`` checked and completed with OpenAI's defaults (as reported
    back in ``session.updated``); fields this server does not use (``create_response``,
    ``interrupt_response``, ``idle_timeout_ms``) are kept as given."""
    if value is None:
        return None
    td = dict(_object(value, param))
    kind = td.get("type")
    if kind == "server_vad":
        for key, default in SERVER_VAD_DEFAULTS.items():
            v = td.get(key)
            if v is None:
                td[key] = default
                continue
            if key == "threshold":
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0
                want = "a number within 0.0..1.0"
            else:
                ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10_000
                want = "an integer within 0..10000 (ms)"
            if not ok:
                raise ProtocolError(INVALID_VALUE, f"turn_detection.{key} must be {want}", f"{param}.{key}")
    elif kind == "semantic_vad":
        eagerness = td.get("eagerness") or "auto"
        if not isinstance(eagerness, str) or eagerness not in EAGERNESS_SILENCE_MS:  # a list is unhashable
            raise ProtocolError(INVALID_VALUE, "turn_detection.eagerness must be one of "
                                               f"{', '.join(EAGERNESS_SILENCE_MS)}", f"{param}.eagerness")
        td["eagerness"] = eagerness
    else:
        raise ProtocolError(INVALID_VALUE, "turn_detection.type must be 'server_vad' or 'semantic_vad' "
                                           "(or turn_detection null)", f"{param}.type")
    return td


def turn_config(td: dict[str, Any]) -> tuple[TurnConfig, bool]:
    """A parsed ``turn_detection`` onto the stream's ``(turns, semantic_turns)``.

    ``server_vad``: ``threshold``, ``prefix_padding_ms``, ``silence_duration_ms`` as given.
    ``semantic_vad``: OpenAI's defaults for threshold and padding, the silence from
    ``eagerness`` (:data:`EAGERNESS_SILENCE_MS`: low 1000 ms, medium/auto 500, high 250), and
    the end of turn read from the text so far (``semantic_turns``)."""
    if td.get("type") == "semantic_vad":
        return TurnConfig(SERVER_VAD_DEFAULTS["threshold"], SERVER_VAD_DEFAULTS["prefix_padding_ms"],
                          EAGERNESS_SILENCE_MS[td.get("eagerness") or "auto"]), True
    return TurnConfig(float(td["threshold"]), int(td["prefix_padding_ms"]), int(td["silence_duration_ms"])), False


def session_object(settings: SessionSettings, *, dialect: str, session_id: str, model_name: str) -> dict[str, Any]:
    """The session as ``session.created/updated`` (GA) or ``transcription_session.*`` (beta) report it."""
    cfg = settings.stream_config()
    transcription = {"model": model_name, "language": settings.language, "prompt": settings.prompt}
    if settings.delay is not None:
        transcription["delay"] = settings.delay
    ext = {"latency": settings.latency, "chunk_ms": cfg.chunk_ms, "lookahead_ms": cfg.lookahead_ms,
           "commit_margin_ms": cfg.commit_margin_ms, "requested_model": settings.model,
           **(settings.diarization.as_dict() if settings.diarization else {"diarize": False})}
    if dialect == "beta":
        return {"id": session_id, "object": "realtime.transcription_session", "modalities": ["text"],
                "input_audio_format": "pcm16", "input_audio_transcription": transcription,
                "turn_detection": settings.turn_detection, "include": list(settings.include),
                "input_audio_noise_reduction": None, "susurrus": {**ext, "rate": settings.rate}}
    return {"type": "transcription", "object": "realtime.transcription_session", "id": session_id,
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": settings.rate},
                                "transcription": transcription, "noise_reduction": None,
                                "turn_detection": settings.turn_detection}},
            "include": list(settings.include), "susurrus": ext}
