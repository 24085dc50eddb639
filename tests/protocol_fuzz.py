"""A property-based fuzzer for the realtime WebSocket protocol and the REST upload, shared by
``tests/test_fuzz_protocol.py`` (a small, derandomized budget) and ``benchmarks/fuzz_protocol.py``
(a large one). It lives in three files, gathered here: ``fuzz_cases.py`` (what a case is and the
values, events and mutations Hypothesis draws), ``fuzz_realtime.py`` (the realtime runners, depths
1-3) and ``fuzz_rest.py`` (the REST upload).

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

from fuzz_cases import CaseResult, Step, protocol_cases
from fuzz_realtime import (
    ProtocolChecker,
    _changes_item,
    check_error,
    run_protocol,
    run_server,
    run_transcribed,
    speech_cases,
    transcribed_cases,
)
from fuzz_rest import form_cases, run_form, run_rest, run_upload, upload_bytes, wav_bytes

__all__ = ["CaseResult", "ProtocolChecker", "Step", "_changes_item", "check_error", "form_cases", "protocol_cases",
           "run_form", "run_protocol", "run_rest", "run_server", "run_transcribed", "run_upload", "speech_cases",
           "transcribed_cases", "upload_bytes", "wav_bytes"]
