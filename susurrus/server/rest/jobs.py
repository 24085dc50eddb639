"""The REST API's work, run in a thread of the server's pool (never on the event loop): decoding
an upload, ``susurrus transcribe`` on it (in a worker process, window by window) and ``susurrus
stream`` on it (a stream in a worker process, its committed text handed out as it comes)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile as sf
from starlette.responses import JSONResponse

from susurrus.audio.io import decode_audio
from susurrus.audio.sniff import sniff
from susurrus.decoding import offline
from susurrus.server.workers.pool import compute_clock
from susurrus.streaming.session import Committed

SAMPLE_RATE = 16000
MIN_AUDIO_S = 0.1  # OpenAI's minimum
MAX_AMPLITUDE = 1000.0  # float samples beyond this (60 dB over full scale) are not a recording: refused


@dataclass(frozen=True)
class UploadLimits:
    """REST uploads: ``max_bytes`` of file (OpenAI's 25 MB) and ``max_seconds`` of audio."""

    max_bytes: int = 25 * 1024 * 1024
    max_seconds: float = 600.0


class RestError(Exception):
    """A refused request: HTTP ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str | None, param: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.type = status, message, code, param, type
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class Cancelled(Exception):
    """The job stopped early: nobody waits for its answer, or the server shuts down."""


class Cancel(threading.Event):
    """Set to stop a job at its next window or block; ``reason`` is what its audio is counted as
    dropped for (``client_gone``, ``drain_deadline``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = "client_gone"

    def cancel(self, reason: str = "client_gone") -> None:
        if not self.is_set():
            self.reason = reason
            self.set()


def decode_upload(data: bytes, limits: UploadLimits) -> np.ndarray:
    """The upload as 16 kHz mono samples, or :class:`RestError` (not audio, too long, too short).
    A file that says its length is refused before it is decoded."""
    try:
        info = sf.info(io.BytesIO(data))
        declared = info.frames / info.samplerate if info.samplerate else 0.0
    except Exception:  # noqa: BLE001 - not a format libsndfile knows: the decoder says more
        declared = 0.0
    if declared > limits.max_seconds:
        raise too_long(declared, limits)
    try:
        samples = decode_audio(data)
    except (ValueError, OSError):  # the decoders' own words name an in-memory object (<_io.BytesIO at 0x...>)
        kind = sniff(data[:16])
        why = (f"it starts as {kind.upper()} audio does, but is damaged or cut short" if kind
               else "its first bytes are those of no audio format")
        raise RestError(400, f"the file could not be decoded as audio ({why}); send WAV, FLAC, OGG or MP3 (or "
                             "any format when ffmpeg is installed on the server)", "invalid_file_format",
                        "file") from None
    if len(samples) and not np.abs(samples).max() <= MAX_AMPLITUDE:
        # a float file may hold NaN, Inf or absurd values: the model would read NaN logits (and the
        # offline job run its whole temperature ladder over them before failing)
        raise RestError(400, f"the audio holds NaN, infinite or out-of-range samples (beyond {MAX_AMPLITUDE:g}x "
                             "full scale)", "invalid_file_format", "file")
    seconds = len(samples) / SAMPLE_RATE
    if seconds > limits.max_seconds:
        raise too_long(seconds, limits)
    if seconds < MIN_AUDIO_S:
        raise RestError(400, f"the audio is {seconds:.3f} s long; the minimum is {MIN_AUDIO_S} s",
                        "audio_too_short", "file")
    return samples


def too_long(seconds: float, limits: UploadLimits) -> RestError:
    return RestError(400, f"the audio is {seconds:.1f} s long; this server takes at most {limits.max_seconds:g} s "
                          "(susurrus serve --max-upload-s)", "audio_too_long", "file")


def too_large(limits: UploadLimits) -> RestError:
    return RestError(413, f"the upload exceeds this server's limit of {limits.max_bytes} bytes "
                          "(susurrus serve --max-upload-mb)", "file_too_large", "file")


# ---------------------------------------------------------------------------- the jobs (in a pool thread)


def offline_job(state: Any, samples: np.ndarray, options: dict[str, Any], cancel: Cancel) -> tuple:
    """``susurrus transcribe`` on the samples: ``(info, segments)``, in a worker process window by
    window (or here, with no workers); stops between windows once ``cancel`` is set. The audio
    counts as transcribed when the answer is made, else as dropped (``cancel.reason``, or
    ``failed``): a stopped job's client gets no text."""
    t0 = compute_clock()
    seconds = len(samples) / SAMPLE_RATE
    done = False
    job = state.workers.iterate(offline.run, samples, options) if state.workers is not None else \
        offline.run(state.model, samples, options)
    try:
        info = next(job)
        segments = []
        for segment in job:
            segments.append(segment)
            if cancel.is_set():
                raise Cancelled
        done = True
        return info, segments
    except Cancelled:
        state.metrics.dropped(seconds, cancel.reason)
        raise
    except BaseException:
        state.metrics.dropped(seconds, "failed")
        raise
    finally:
        job.close()
        state.metrics.processed(seconds if done else 0.0, compute_clock() - t0, ())


def stream_job(state: Any, samples: np.ndarray, language: str | None, task: str,
               emit: Callable[[str, Any], None], cancel: Cancel, prompt: str | None = None) -> None:
    """``susurrus stream`` on the samples: ``emit("delta", text)`` for each committed piece as it
    is committed, then ``emit("done", transcript)`` (or ``emit("error", body)``). The samples fed
    count as transcribed, the rest as dropped (``cancel.reason``, or ``failed``)."""
    t0 = compute_clock()
    latencies: list[float] = []
    pieces: list[str] = []
    stream = None
    fed = 0
    try:
        stream = (state.workers or state.model).stream("medium", language=language, task=task, prompt=prompt)
        block = stream.config.step_samples

        def send(events: list) -> None:
            for ev in events:
                if not isinstance(ev, Committed):
                    continue
                text = ev.text if pieces else ev.text.lstrip()
                latencies.extend(max(0.0, w.emitted_at - w.end) for w in ev.words)
                if text:
                    pieces.append(text)
                    emit("delta", text)

        for fed in range(0, len(samples), block):
            if cancel.is_set():
                state.metrics.dropped((len(samples) - fed) / SAMPLE_RATE, cancel.reason)
                if cancel.reason == "drain_deadline":
                    emit("error", shutting_down().body()["error"])
                return
            send(stream.feed(samples[fed:fed + block]))
        fed = len(samples)
        send(stream.finish())
        emit("done", "".join(pieces))
    except Exception as err:  # noqa: BLE001 - reported in the event stream
        state.metrics.dropped((len(samples) - min(fed, len(samples))) / SAMPLE_RATE, "failed")
        state.metrics.error("server_error", "transcription_failed")
        emit("error", RestError(500, f"transcription failed: {type(err).__name__}: {err}", "transcription_failed",
                                type="server_error").body()["error"])
    finally:
        state.metrics.processed(min(fed, len(samples)) / SAMPLE_RATE, compute_clock() - t0, latencies,
                                getattr(stream, "steps", 0))
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def shutting_down() -> RestError:
    return RestError(503, "the server is shutting down and takes no new work; send the request again shortly (to "
                          "its replacement)", "server_shutting_down", type="server_error",
                     headers={"retry-after": "5", "connection": "close"})
