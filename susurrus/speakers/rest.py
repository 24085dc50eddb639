"""Speaker labels in the REST API: ``response_format=diarized_json`` (OpenAI's shape:
``TranscriptionDiarized``, segments of ``type`` ``transcript.text.segment`` with a ``speaker``),
and ``diarize=true`` for ``json``/``verbose_json`` (``speaker`` on verbose_json's segments and
words). Known speakers as OpenAI takes them: ``known_speaker_names[]`` with
``known_speaker_references[]`` (audio as ``data:`` URLs, base64), plus susurrus' own
``speakers``, ``min_speakers``, ``max_speakers`` fields."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_REFERENCES = 4  # as OpenAI


@dataclass(frozen=True)
class SpeakerRequest:
    speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    refs: dict[str, bytes] = field(default_factory=dict)


def parse_speakers(form: Any, fmt: str, error: Any) -> SpeakerRequest | None:
    """The request's speaker settings (None: no labels); ``error(message, param)`` makes the 400."""
    flag = str(form.get("diarize") or "false").strip().lower()
    if flag not in ("true", "false", "1", "0"):
        raise error(f"diarize must be true or false, not {flag!r}", "diarize")
    names = [str(v).strip() for v in form.getlist("known_speaker_names[]") + form.getlist("known_speaker_names")]
    refs = [str(v).strip() for v in form.getlist("known_speaker_references[]") +
            form.getlist("known_speaker_references")]
    if fmt != "diarized_json" and flag not in ("true", "1"):
        if names or refs:
            raise error("known speakers need response_format=diarized_json or diarize=true", "known_speaker_names")
        return None
    if len(names) != len(refs):
        raise error(f"{len(names)} known_speaker_names but {len(refs)} known_speaker_references: one each",
                    "known_speaker_references")
    if len(names) > MAX_REFERENCES:
        raise error(f"at most {MAX_REFERENCES} known speakers", "known_speaker_names")
    clips: dict[str, bytes] = {}
    for name, ref in zip(names, refs, strict=True):
        if not name or name in clips:
            raise error(f"known speaker name {name!r} is empty or repeated", "known_speaker_names")
        head, sep, b64 = ref.partition(",")
        if not (ref.startswith("data:") and sep and head.endswith(";base64")):
            raise error(f"known speaker reference for {name!r}: expected a data URL (data:audio/wav;base64,...)",
                        "known_speaker_references")
        try:
            clips[name] = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise error(f"known speaker reference for {name!r}: not valid base64", "known_speaker_references") \
                from None
    counts = {}
    for key in ("speakers", "min_speakers", "max_speakers"):
        raw = str(form.get(key) or "").strip()
        if raw:
            if not raw.isdigit() or int(raw) < 1:
                raise error(f"{key} must be a whole number of at least 1, not {raw!r}", key)
            counts[key] = int(raw)
    return SpeakerRequest(refs=clips, **counts)


def label_segments(samples: np.ndarray, segments: list, spec: SpeakerRequest) -> list:
    """The segments labelled (offline clustering of the whole upload); a bad reference clip or
    count raises ``ValueError`` naming it."""
    import io

    from susurrus.audio.io import decode_audio
    from susurrus.speakers import make_tracker
    from susurrus.speakers.offline import diarize_segments
    from susurrus.speakers.references import SpeakerReferenceError

    refs = {}
    for name, data in spec.refs.items():
        try:
            refs[name] = decode_audio(io.BytesIO(data))
        except Exception as e:  # noqa: BLE001 (any decoder failure is the clip's)
            raise SpeakerReferenceError(f"speaker reference {name!r}: not readable audio ({e})") from None
    tracker = make_tracker(spec.speakers, spec.min_speakers, spec.max_speakers, refs, keep_all=True)
    return diarize_segments(samples, segments, tracker)


def diarized_body(info: Any, segments: list, text: str) -> dict[str, Any]:
    """OpenAI's ``TranscriptionDiarized``."""
    return {"task": "transcribe", "duration": round(info.duration, 3), "text": text,
            "segments": [{"type": "transcript.text.segment", "id": f"seg_{i:03d}", "start": round(s.start, 3),
                          "end": round(s.end, 3), "text": s.text.strip(), "speaker": s.speaker or "S1"}
                         for i, s in enumerate(segments)],
            "usage": {"type": "duration", "seconds": round(info.duration, 3)}}
