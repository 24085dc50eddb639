"""OpenAI's audio REST API: ``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations``
and ``GET /v1/models``, beside the realtime WebSocket in ``susurrus serve``.

An upload (multipart ``file``, any format :func:`~susurrus.audio.io.decode_audio` reads) is
transcribed offline with the options of ``susurrus transcribe --beam-size 1``
(:data:`REST_BEAM_SIZE`: greedy decoding, the temperature fallback ladder when a window's
decode fails its checks), so the text is that command's for the same file and settings;
``response_format`` picks OpenAI's shape (``json``, ``verbose_json``) or the command's own
files (``text`` = ``-f txt``, ``srt``, ``vtt``). With ``stream=true`` the file is fed to the
incremental streaming engine instead (as ``susurrus stream FILE`` does) and the answer is server-sent events: a
``transcript.text.delta`` for each piece of committed text, as soon as it is committed, then
``transcript.text.done``.

Compute never runs on the event loop. The offline job runs in the worker processes that host the
realtime streams (``WorkerPool.iterate``: one 30 s window per request, run there as background
work, once the realtime streams' rounds leave the worker idle or after 1 s at most: an upload
delays a worker's streams by at most one window at a time), the streamed one as a stream
there; a thread of the server's pool waits for each. With ``--workers 0`` both run in those
threads on the server's model. A request holds one of ``--max-sessions`` slots (shared with
WebSocket sessions) while it computes; audio, compute, errors and requests are counted in
``/metrics``. Uploads are bounded (``--max-upload-mb``, ``--max-upload-s``).

``model``: the server serves one model. The field may be left out, name it, or name one of
OpenAI's speech-to-text models (``whisper-1``, ``gpt-4o-transcribe``, ...: clients that hard-code
them work); the server's model answers, and says so in the ``x-susurrus-model`` header.
Anything else is ``404 model_not_found``. ``GET /v1/models`` lists every accepted id.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from susurrus.decoding import offline
from susurrus.model.languages import LANGUAGES, language_code, language_name
from susurrus.server.access import key_matches
from susurrus.server.rest import jobs as rest_jobs
from susurrus.server.rest.jobs import (
    Cancel,
    Cancelled,
    RestError,
    UploadLimits,
    decode_upload,
    offline_job,
    shutting_down,
    stream_job,
    too_large,
)
from susurrus.speakers.rest import SpeakerRequest, diarized_body, label_segments, parse_speakers
from susurrus.writers import render_result, transcript_text

FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
STREAMABLE = ("json", "text")
# OpenAI's speech-to-text model names, answered by the server's model
OPENAI_MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "gpt-4o-mini-transcribe-2025-12-15",
                 "gpt-4o-transcribe-diarize", "gpt-transcribe")
# a text field's size at most: known_speaker_references[] are audio clips as data URLs (a 10 s
# 16-bit 48 kHz clip is 1.3 MB in base64); the other fields are small
MAX_FIELD_BYTES = 2 * 1024 * 1024
FORM_OVERHEAD = 256 * 1024  # multipart headers and the small fields, beyond the file itself
DRAIN_FACTOR = 4  # a refused upload is read (and discarded) up to this many times the limit, so the
# client gets the error instead of a broken pipe; beyond that the connection is closed


class _TooLarge(Exception):
    pass


class LimitedBody:
    """An ASGI ``receive`` that counts the request body and raises once it passes ``limit``."""

    def __init__(self, receive: Callable[[], Any], limit: int):
        self.receive, self.limit, self.size, self.done = receive, limit, 0, False

    async def __call__(self) -> dict[str, Any]:
        message = await self.receive()
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            self.done = not message.get("more_body", False)
            if self.size > self.limit:
                raise _TooLarge
        return message

    async def drain(self, cap: int) -> None:
        """Read and discard the rest of the body, up to ``cap`` bytes in all."""
        while not self.done and self.size <= cap:
            message = await self.receive()
            if message["type"] != "http.request":
                return
            self.size += len(message.get("body", b""))
            self.done = not message.get("more_body", False)


# Greedy decoding first, the temperature fallback only for a window whose decode fails its
# checks: the default of openai/whisper's ``transcribe()`` (its CLI's is beam 5). Beam 5 costs
# 1.8x the compute (tiny.en on dev: 0.194 against 0.109 core-s per audio second) for 0.3 WER
# points (5.35 against 5.69 %, docs/benchmarks.md); greedy keeps a 10-minute upload inside the
# OpenAI SDK's 600 s timeout on a busy machine. OpenAI's API has no beam parameter to ask for more.
REST_BEAM_SIZE = 1


@dataclass(frozen=True)
class AudioRequest:
    """A checked request: what to run and how to answer."""

    task: str  # transcribe or translate
    language: str | None
    prompt: str | None
    temperature: float | None  # None: the fallback ladder (OpenAI's 0)
    response_format: str
    words: bool  # timestamp_granularities[] holds "word"
    stream: bool
    speakers: SpeakerRequest | None = None  # speaker labels (speakers/rest.py)

    def options(self) -> dict[str, Any]:
        """``susurrus transcribe --beam-size 1``'s options for this request."""
        return offline.transcribe_options(language=self.language, task=self.task, temperature=self.temperature,
                                          word_timestamps=self.words or self.speakers is not None,
                                          initial_prompt=self.prompt or None, beam_size=REST_BEAM_SIZE)


def accepted_models(model: Any) -> tuple[str, ...]:
    return (model.name, *(m for m in OPENAI_MODELS if m != model.name))


def _text_field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RestError(400, f"'{name}' must be a text field, not a file", "invalid_value", name)
    return value.strip()


def parse_request(form: FormData, task: str, model: Any) -> AudioRequest:
    """The form's fields checked against the server's ``model``; :class:`RestError` if wrong."""
    name = _text_field(form, "model")
    if name and name not in accepted_models(model):
        raise RestError(404, f"The model '{name}' does not exist: this server serves {model.name} (also accepted "
                             f"under OpenAI's names: {', '.join(OPENAI_MODELS)}); GET /v1/models lists them",
                        "model_not_found", "model")
    fmt = _text_field(form, "response_format") or "json"
    if fmt not in FORMATS:
        raise RestError(400, f"response_format {fmt!r} is not supported; use one of {', '.join(FORMATS)}",
                        "invalid_value", "response_format")
    language = _text_field(form, "language") or None
    if language is not None:
        try:
            language = language_code(language)
        except ValueError as err:
            raise RestError(400, str(err), "invalid_value", "language") from None
        if not model.is_multilingual and language != "en":
            raise RestError(400, f"language {language!r} is not available: the server's model {model.name} is "
                                 "English-only", "invalid_value", "language")
        if model.is_multilingual and language not in model.tokenizer.language_codes:
            raise RestError(400, f"the server's model {model.name} does not know {language_name(language)}",
                            "invalid_value", "language")
    if task == "translate" and not model.is_multilingual:
        raise RestError(400, f"the server's model {model.name} is English-only and cannot translate: serve a "
                             "multilingual model (susurrus serve --model base)", "unsupported_value", "model")
    temperature = None
    raw = _text_field(form, "temperature")
    if raw:
        try:
            temperature = float(raw)
        except ValueError:
            temperature = math.nan
        if not 0.0 <= temperature <= 1.0:
            raise RestError(400, f"temperature must be a number within 0..1, not {raw!r}", "invalid_value",
                            "temperature")
    granularities = [v for key in ("timestamp_granularities[]", "timestamp_granularities")
                     for v in form.getlist(key)]
    for g in granularities:
        if g not in ("word", "segment"):
            raise RestError(400, f"timestamp_granularities holds {g!r}: use 'word' and/or 'segment'",
                            "invalid_value", "timestamp_granularities")
    stream = (_text_field(form, "stream") or "false").lower()
    if stream not in ("true", "false", "1", "0"):
        raise RestError(400, f"stream must be true or false, not {stream!r}", "invalid_value", "stream")
    if stream in ("true", "1") and fmt not in STREAMABLE:
        raise RestError(400, f"stream=true answers with transcript.text events; response_format {fmt!r} cannot "
                             f"be streamed (use {' or '.join(STREAMABLE)})", "invalid_value", "response_format")
    speakers = parse_speakers(form, fmt, lambda msg, param: RestError(400, msg, "invalid_value", param))
    if speakers is not None and (task == "translate" or stream in ("true", "1")):
        raise RestError(400, "speaker labels are given for transcriptions answered whole (not translate, not "
                             "stream=true)", "invalid_value", "response_format")
    return AudioRequest(task, language, _text_field(form, "prompt"), temperature or None, fmt,
                        "word" in granularities, stream in ("true", "1"), speakers)


# ---------------------------------------------------------------------------- answers


def _segment_dict(s: Any) -> dict[str, Any]:
    return {"id": s.id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
            "temperature": s.temperature, "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
            "no_speech_prob": s.no_speech_prob, **({"speaker": s.speaker} if s.speaker else {})}


def render(req: AudioRequest, info: Any, segments: list, headers: dict[str, str]) -> Response:
    """The answer in ``req.response_format``: text, srt and vtt are what ``susurrus transcribe``
    writes to its files (``text`` = ``-f txt``); json's ``text`` is its json's ``text``."""
    if req.response_format in ("text", "srt", "vtt"):
        fmt = "txt" if req.response_format == "text" else req.response_format
        return PlainTextResponse(render_result(fmt, segments, info), headers=headers)
    usage = {"type": "duration", "seconds": round(info.duration, 3)}
    body: dict[str, Any] = {"text": transcript_text(segments)}
    if req.response_format == "diarized_json":
        return JSONResponse(diarized_body(info, segments, body["text"]), headers=headers)
    if req.response_format == "verbose_json":
        language = "english" if req.task == "translate" else LANGUAGES.get(info.language, info.language)
        body = {"task": req.task, "language": language, "duration": round(info.duration, 3), **body,
                "segments": [_segment_dict(s) for s in segments]}
        if req.words:
            body["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end, "probability": w.probability,
                              **({"speaker": w.speaker} if w.speaker else {})} for s in segments for w in s.words or []]
    if req.task == "transcribe":
        body["usage"] = usage
    return JSONResponse(body, headers=headers)


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


# ---------------------------------------------------------------------------- endpoints


def _check_key(request: Request, api_key: str | None) -> None:
    if api_key is None:
        return
    auth = request.headers.get("authorization", "")
    if not (auth.lower().startswith("bearer ") and key_matches(auth[7:].strip(), api_key)):
        raise RestError(401, "missing or invalid API key: send 'Authorization: Bearer KEY'", "invalid_api_key")


def _take_slot(state: Any) -> Callable[[], None]:
    """One of ``max_sessions`` slots (shared with WebSocket sessions) or 429 (503 while the server
    shuts down); returns its release."""
    if state.shutdown.draining:
        raise shutting_down()
    m = state.metrics
    with m.lock:
        if m.sessions_open + m.requests_open >= state.limits.max_sessions:
            raise RestError(429, f"the server is at its limit of {state.limits.max_sessions} concurrent sessions "
                                 "and requests; try again later", "session_limit_reached", type="server_error",
                            headers={"retry-after": "1"})
        m.requests_open += 1
    released = threading.Event()

    def release(*_: Any) -> None:
        if not released.is_set():
            released.set()
            with m.lock:
                m.requests_open -= 1
    return release


async def audio_endpoint(request: Request) -> Response:
    state = request.app.state.susurrus
    endpoint = request.url.path.rsplit("/", 1)[-1]  # transcriptions or translations
    try:
        response = await _audio(request, state, "translate" if endpoint == "translations" else "transcribe")
    except RestError as err:
        state.metrics.error(err.type, err.code or "")
        response = err.response()
    state.metrics.request(endpoint, response.status_code)
    return response


async def _audio(request: Request, state: Any, task: str) -> Response:
    limits: UploadLimits = state.uploads
    body = LimitedBody(request.receive, limits.max_bytes + FORM_OVERHEAD)
    try:
        _check_key(request, state.api_key)
        if state.shutdown.draining:
            raise shutting_down()
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > body.limit:
            raise too_large(limits)
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise RestError(400, "send the audio as multipart/form-data with a 'file' field", "invalid_request",
                            "file")
        try:
            form = await Request(request.scope, body).form(max_files=4, max_fields=64, max_part_size=MAX_FIELD_BYTES)
        except _TooLarge:
            raise too_large(limits) from None
        except HTTPException as err:
            raise RestError(400, f"the multipart body could not be read: {err.detail}", "invalid_request") from None
        try:
            req = parse_request(form, task, state.model)
            upload = form.get("file")
            if upload is None:
                raise RestError(400, "no 'file' field: send the audio as the multipart field 'file'",
                                "missing_required_parameter", "file")
            if not isinstance(upload, UploadFile):
                raise RestError(400, "'file' must be a file upload, not a text field", "invalid_value", "file")
            data = await upload.read()
        finally:
            await form.close()
    except RestError:
        await body.drain(DRAIN_FACTOR * body.limit)
        raise
    if len(data) > limits.max_bytes:
        raise too_large(limits)
    if not data:
        raise RestError(400, "the uploaded file is empty", "empty_file", "file")
    loop = asyncio.get_running_loop()
    release = _take_slot(state)
    try:
        samples = await loop.run_in_executor(state.pool, decode_upload, data, limits)
    except BaseException:
        release()
        raise
    headers = {"x-susurrus-model": state.model.name}
    state.metrics.accepted(len(samples) / rest_jobs.SAMPLE_RATE)
    cancel = Cancel()  # set by a client that leaves, or by the end of the server's drain
    state.jobs.add(cancel)

    def finished(*_: Any) -> None:  # in the pool's thread: set.discard is atomic
        state.jobs.discard(cancel)
        release()

    if req.stream:
        return _streamed(state, samples, req, cancel, finished, headers)
    future = state.pool.submit(offline_job, state, samples, req.options(), cancel)
    future.add_done_callback(finished)
    waiting = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait([waiting], timeout=1.0)
        if done:
            break
        if await request.is_disconnected():  # nobody waits for the answer: stop at the next window
            cancel.cancel("client_gone")
    try:
        info, segments = waiting.result()
    except Cancelled:
        if cancel.reason == "drain_deadline":
            raise shutting_down() from None
        return Response(status_code=499)
    except Exception as err:  # noqa: BLE001 - a failed job is a 500 with OpenAI's body
        raise RestError(500, f"transcription failed: {type(err).__name__}: {err}", "transcription_failed",
                        type="server_error") from None
    if req.speakers is not None:
        try:
            segments = await loop.run_in_executor(state.pool, label_segments, samples, segments, req.speakers)
        except ValueError as err:  # a bad reference clip or count, named
            raise RestError(400, str(err), "invalid_value", "known_speaker_references") from None
    return render(req, info, segments, headers)


def _streamed(state: Any, samples: np.ndarray, req: AudioRequest, cancel: Cancel,
              release: Callable[[], None], headers: dict[str, str]) -> StreamingResponse:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    future = state.pool.submit(stream_job, state, samples, req.language, req.task, emit, cancel, req.prompt or None)
    future.add_done_callback(release)

    async def events() -> AsyncIterator[bytes]:
        try:
            while True:
                kind, value = await queue.get()
                if kind == "delta":
                    yield _sse({"type": "transcript.text.delta", "delta": value})
                elif kind == "done":
                    yield _sse({"type": "transcript.text.done", "text": value})
                    return
                else:
                    yield _sse({"error": value})
                    return
        finally:
            cancel.cancel("client_gone")  # the client left, or the stream ended: the job stops at its next block

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})


async def models_endpoint(request: Request) -> Response:
    state = request.app.state.susurrus
    try:
        _check_key(request, state.api_key)
        ids = accepted_models(state.model)
        wanted = request.path_params.get("model")
        if wanted is not None and wanted not in ids:
            raise RestError(404, f"The model '{wanted}' does not exist", "model_not_found", "model")
    except RestError as err:
        state.metrics.error(err.type, err.code or "")
        state.metrics.request("models", err.status)
        return err.response()
    created = int(state.started)
    listed = [{"id": i, "object": "model", "created": created, "owned_by": "susurrus"} for i in ids]
    state.metrics.request("models", 200)
    if wanted is not None:
        return JSONResponse(next(m for m in listed if m["id"] == wanted))
    return JSONResponse({"object": "list", "data": listed})


async def post_only(request: Request) -> Response:
    """Another method than POST on an upload endpoint: OpenAI's JSON error, 405, ``allow: POST``."""
    return RestError(405, f"Invalid method for URL ({request.method} {request.url.path}): use POST with a "
                          "multipart 'file'", "method_not_allowed", headers={"allow": "POST"}).response()


def routes() -> list[Route]:
    others = ["GET", "PUT", "PATCH", "DELETE"]  # (HEAD comes with GET)
    return [Route("/v1/audio/transcriptions", audio_endpoint, methods=["POST"]),
            Route("/v1/audio/translations", audio_endpoint, methods=["POST"]),
            Route("/v1/audio/transcriptions", post_only, methods=others),
            Route("/v1/audio/translations", post_only, methods=others),
            Route("/v1/models", models_endpoint, methods=["GET"]),
            Route("/v1/models/{model:path}", models_endpoint, methods=["GET"])]
