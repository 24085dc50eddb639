"""The REST API's refusals read as OpenAI's and say what is wrong in the user's terms: another
method than POST on an upload endpoint is a JSON 405 with ``allow: POST``; a file that is no
audio is named as such, without the decoder's view of an in-memory object."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid


def _call(url: str, method: str, body: bytes | None = None, headers: dict | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_other_methods_than_post_get_openais_json_405(server):
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        for method in ("GET", "PUT", "DELETE"):
            status, headers, body = _call(server.http_url + path, method)
            assert status == 405 and headers.get("allow") == "POST", (path, method, body)
            error = json.loads(body)["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "method_not_allowed"
            assert f"{method} {path}" in error["message"]


def test_a_file_that_is_no_audio_is_named_so(server):
    for name, data, said in (("notes.wav", b"not audio at all " * 64, "its first bytes are those of no audio format"),
                             ("cut.flac", b"fLaC" + bytes(60), "starts as FLAC audio does, but is damaged")):
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + (
                f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
                f"--{boundary}--\r\n").encode()
        status, _, answer = _call(server.http_url + "/v1/audio/transcriptions", "POST", body,
                                  {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        error = json.loads(answer)["error"]
        assert status == 400 and error["code"] == "invalid_file_format"
        assert said in error["message"] and "BytesIO" not in error["message"] and "0x" not in error["message"]
