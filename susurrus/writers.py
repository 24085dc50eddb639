"""Writers that save transcription results as plain text, SRT, WebVTT or JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from susurrus.types import Segment, TranscriptionInfo


def format_timestamp(
    seconds: float, always_include_hours: bool = False, decimal_marker: str = "."
) -> str:
    """Format seconds as ``[HH:]MM:SS<marker>mmm``, rounded to the millisecond."""
    if seconds < 0:
        raise ValueError(f"timestamp must be non-negative, got {seconds}")
    total_ms = round(seconds * 1000)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    prefix = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{prefix}{minutes:02d}:{secs:02d}{decimal_marker}{millis:03d}"


def _cue_text(segment: Segment, label: bool = True) -> str:
    """Segment text made safe for a subtitle cue: stripped, no arrows, no blank lines."""
    text = segment.text.strip().replace("-->", "->")
    text = "\n".join(line for line in text.splitlines() if line.strip())
    return f"[{segment.speaker}] {text}" if segment.speaker and label else text


def transcript_text(segments: Iterable[Segment]) -> str:
    """The whole transcript as one string: the segments' texts joined, stripped (json's ``text``)."""
    return "".join(segment.text for segment in segments).strip()


def write_txt(segments: Iterable[Segment], file: TextIO) -> None:
    """Write one stripped segment text per line."""
    for segment in segments:
        print(f"[{segment.speaker}] " * bool(segment.speaker) + segment.text.strip(), file=file, flush=True)


def write_srt(segments: Iterable[Segment], file: TextIO) -> None:
    """Write SubRip cues numbered from 1, with ``HH:MM:SS,mmm`` timestamps."""
    for index, segment in enumerate(segments, start=1):
        start = format_timestamp(segment.start, always_include_hours=True, decimal_marker=",")
        end = format_timestamp(segment.end, always_include_hours=True, decimal_marker=",")
        print(f"{index}\n{start} --> {end}\n{_cue_text(segment)}\n", file=file, flush=True)


def write_vtt(segments: Iterable[Segment], file: TextIO) -> None:
    """Write a WebVTT file with ``[HH:]MM:SS.mmm`` timestamps."""
    print("WEBVTT\n", file=file)
    for segment in segments:
        start = format_timestamp(segment.start)
        end = format_timestamp(segment.end)
        cue = f"<v {segment.speaker}>{_cue_text(segment, False)}" if segment.speaker else _cue_text(segment)
        print(f"{start} --> {end}\n{cue}\n", file=file, flush=True)


def write_json(segments: Iterable[Segment], info: TranscriptionInfo | None, file: TextIO) -> None:
    """Write the full text, language, duration and per-segment (and word) timings as JSON."""
    segments = list(segments)
    result: dict[str, Any] = {
        "text": transcript_text(segments),
        "language": info.language if info is not None else None,
        "duration": round(info.duration, 3) if info is not None else None,
        "segments": [
            {
                "id": segment.id,
                "start": round(segment.start, 3),
                "end": round(segment.end, 3),
                "text": segment.text.strip(),
                **({"speaker": segment.speaker} if segment.speaker else {}),
                "words": None
                if segment.words is None
                else [
                    {
                        "word": word.word,
                        "start": round(word.start, 3),
                        "end": round(word.end, 3),
                        "probability": word.probability,
                        **({"speaker": word.speaker} if word.speaker else {}),
                    }
                    for word in segment.words
                ],
            }
            for segment in segments
        ],
    }
    json.dump(result, file, ensure_ascii=False, indent=2)
    file.write("\n")


WRITERS: dict[str, Callable[..., None]] = {
    "txt": write_txt,
    "srt": write_srt,
    "vtt": write_vtt,
    "json": write_json,
}
_NEEDS_INFO = frozenset({"json"})


def render_result(fmt: str, segments: Iterable[Segment], info: TranscriptionInfo | None) -> str:
    """What :func:`write_result` writes to a file, as a string (the REST API's responses)."""
    key = fmt.lower().lstrip(".")
    writer = WRITERS.get(key)
    if writer is None:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {sorted(WRITERS)}")
    out = io.StringIO()
    if key in _NEEDS_INFO:
        writer(segments, info, out)
    else:
        writer(segments, out)
    return out.getvalue()


def write_result(
    fmt: str,
    segments: Iterable[Segment],
    info: TranscriptionInfo | None,
    path: str | Path,
) -> Path:
    """Write ``segments`` to ``path`` (UTF-8) in format ``fmt``; returns the path written."""
    key = fmt.lower().lstrip(".")
    writer = WRITERS.get(key)
    if writer is None:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {sorted(WRITERS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        if key in _NEEDS_INFO:
            writer(segments, info, file)
        else:
            writer(segments, file)
    return path
