"""Tests for susurrus.writers: TXT, SRT, WebVTT and JSON output."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from susurrus.types import Segment, TranscriptionInfo, Word
from susurrus.writers import (
    WRITERS,
    format_timestamp,
    write_json,
    write_result,
    write_srt,
    write_txt,
    write_vtt,
)

REPO = Path(__file__).resolve().parents[1]


def _segment(
    id: int, start: float, end: float, text: str, words: list[Word] | None = None
) -> Segment:
    return Segment(
        id=id,
        seek=0,
        start=start,
        end=end,
        text=text,
        tokens=[1, 2, 3],
        avg_logprob=-0.2,
        compression_ratio=1.3,
        no_speech_prob=0.01,
        temperature=0.0,
        words=words,
    )


SEGMENTS = [
    _segment(
        0,
        0.0,
        2.5,
        " And so, my fellow Americans,",
        words=[Word(0.0, 0.4, " And", 0.98765), Word(0.4, 0.71234, " so,", 0.5)],
    ),
    _segment(1, 62.345, 65.0004, " ask not what your country can do for you. "),
    _segment(2, 3723.4567, 3725.1, " Café --> naïve"),
]
INFO = TranscriptionInfo(language="en", language_probability=0.97, duration=3725.12345)


def _render(writer: Callable[..., None], *args: object) -> str:
    buf = io.StringIO()
    writer(*args, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("seconds", "kwargs", "expected"),
    [
        (0.0, {}, "00:00.000"),
        (62.345, {}, "01:02.345"),
        (62.345, {"always_include_hours": True, "decimal_marker": ","}, "00:01:02,345"),
        (3723.5, {}, "01:02:03.500"),
        (1.9996, {}, "00:02.000"),
        (59.9996, {}, "01:00.000"),
        (3599.9999, {"always_include_hours": True}, "01:00:00.000"),
        (36000.001, {}, "10:00:00.001"),
    ],
)

def test_format_timestamp(seconds: float, kwargs: dict, expected: str) -> None:
    assert format_timestamp(seconds, **kwargs) == expected


def test_format_timestamp_rejects_negative() -> None:
    with pytest.raises(ValueError):
        format_timestamp(-0.5)


def test_write_txt_strips_each_segment() -> None:
    assert _render(write_txt, SEGMENTS) == (
        "And so, my fellow Americans,\nask not what your country can do for you.\nCafé --> naïve\n"
    )


def test_write_srt_exact() -> None:
    assert _render(write_srt, iter(SEGMENTS)) == (
        "1\n"
        "00:00:00,000 --> 00:00:02,500\n"
        "And so, my fellow Americans,\n"
        "\n"
        "2\n"
        "00:01:02,345 --> 00:01:05,000\n"
        "ask not what your country can do for you.\n"
        "\n"
        "3\n"
        "01:02:03,457 --> 01:02:05,100\n"
        "Café -> naïve\n"
        "\n"
    )


def test_write_vtt_exact() -> None:
    assert _render(write_vtt, SEGMENTS) == (
        "WEBVTT\n"
        "\n"
        "00:00.000 --> 00:02.500\n"
        "And so, my fellow Americans,\n"
        "\n"
        "01:02.345 --> 01:05.000\n"
        "ask not what your country can do for you.\n"
        "\n"
        "01:02:03.457 --> 01:02:05.100\n"
        "Café -> naïve\n"
        "\n"
    )


def test_write_vtt_empty() -> None:
    assert _render(write_vtt, []) == "WEBVTT\n\n"


def test_write_json_round_trips() -> None:
    text = _render(write_json, (s for s in SEGMENTS), INFO)
    assert "Café" in text  # not \u-escaped
    data = json.loads(text)
    assert set(data) == {"text", "language", "duration", "segments"}
    assert data["text"] == (
        "And so, my fellow Americans, ask not what your country can do for you.  Café --> naïve"
    )
    assert data["language"] == "en"
    assert data["duration"] == 3725.123
    assert [s["id"] for s in data["segments"]] == [0, 1, 2]
    first, second, third = data["segments"]
    assert first == {
        "id": 0,
        "start": 0.0,
        "end": 2.5,
        "text": "And so, my fellow Americans,",
        "words": [
            {"word": " And", "start": 0.0, "end": 0.4, "probability": 0.98765},
            {"word": " so,", "start": 0.4, "end": 0.712, "probability": 0.5},
        ],
    }
    assert second["start"] == 62.345 and second["end"] == 65.0
    assert second["text"] == "ask not what your country can do for you."
    assert second["words"] is None
    assert third["start"] == 3723.457 and third["end"] == 3725.1


def test_write_json_without_info() -> None:
    data = json.loads(_render(write_json, SEGMENTS[:1], None))
    assert data["language"] is None and data["duration"] is None
    assert data["text"] == "And so, my fellow Americans,"


@pytest.mark.parametrize("fmt", ["txt", "srt", "vtt", "json"])
def test_write_result_writes_utf8_file(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "out" / f"result.{fmt}"
    written = write_result(fmt, iter(SEGMENTS), INFO, path)
    assert written == path
    content = path.read_bytes().decode("utf-8")
    args = (SEGMENTS, INFO) if fmt == "json" else (SEGMENTS,)
    assert content == _render(WRITERS[fmt], *args)
    assert "naïve" in content


def test_write_result_accepts_upper_case_and_str_path(tmp_path: Path) -> None:
    path = tmp_path / "result.srt"
    write_result("SRT", SEGMENTS, INFO, str(path))
    assert path.read_text(encoding="utf-8").startswith("1\n00:00:00,000 --> 00:00:02,500\n")


def test_write_result_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        write_result("docx", SEGMENTS, INFO, tmp_path / "x.docx")
    assert not (tmp_path / "x.docx").exists()


def test_writers_table() -> None:
    assert set(WRITERS) == {"txt", "srt", "vtt", "json"}
