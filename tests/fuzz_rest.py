"""The fuzzer's REST side: multipart forms and audio bytes for ``POST /v1/audio/transcriptions``,
checked at the form, the decoder and the real endpoint."""

from __future__ import annotations

import io
import json
import math
import struct
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import numpy as np
from fuzz_cases import PCM_SHAPES, REST_CODES, CaseResult, pcm_of
from fuzz_realtime import metric
from hypothesis import strategies as st

from susurrus.server.realtime.items import SAMPLE_RATE

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

    from susurrus.server.rest.api import parse_request
    from susurrus.server.rest.jobs import RestError

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
    from susurrus.server.rest.jobs import RestError, decode_upload

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
