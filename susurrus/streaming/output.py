"""Turning committed stream words into segments and result files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from susurrus.streaming.session import SENTENCE_END, StreamWord
from susurrus.types import Segment, TranscriptionInfo, Word
from susurrus.writers import write_result

CUE_MAX_S = 7.0  # a subtitle cue's longest span, as subtitle guidelines have it (Netflix: 7 s)
CLAUSE_END = (",", ";", ":", "—")  # where a long sentence is cut when it must be


def words_to_segments(words: Sequence[StreamWord], max_gap: float = 1.0, max_len: float = CUE_MAX_S) -> list[Segment]:
    """Group words into segments (subtitle cues) at sentence ends and pauses over ``max_gap`` s;
    a sentence longer than ``max_len`` s is cut at its last clause end (a comma, ...) that keeps
    the cue within it, else before the word that would pass it."""
    groups: list[list[StreamWord]] = []
    for w in words:
        if groups:
            cur = groups[-1]
            ended = cur[-1].word.strip().endswith(SENTENCE_END) or cur[-1].speaker != w.speaker
            if not (ended or w.start - cur[-1].end > max_gap):
                if w.end - cur[0].start <= max_len:
                    cur.append(w)
                    continue
                clause = max((i for i, x in enumerate(cur[:-1]) if x.word.strip().endswith(CLAUSE_END)), default=None)
                if clause is not None:  # the words after the clause end start the next cue
                    groups[-1], rest = cur[:clause + 1], cur[clause + 1:]
                    groups.append([*rest, w])
                    continue
        groups.append([w])
    return [Segment(id=i, seek=0, start=g[0].start, end=g[-1].end, text="".join(w.word for w in g),
                    tokens=[], avg_logprob=0.0, compression_ratio=0.0, no_speech_prob=0.0, temperature=0.0,
                    words=[Word(w.start, w.end, w.word, w.probability, w.speaker) for w in g], speaker=g[0].speaker)
            for i, g in enumerate(groups)]


def write_stream_result(fmt: str, words: Sequence[StreamWord], duration: float, path: str | Path) -> Path:
    """txt/srt/vtt through the common writers; JSON carries every word's emitted_at too."""
    segments = words_to_segments(words)
    if fmt != "json":
        info = TranscriptionInfo(language="", language_probability=1.0, duration=duration)
        return write_result(fmt, segments, info, path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "text": "".join(w.word for w in words).strip(),
        "duration": round(duration, 3),
        "segments": [{"id": s.id, "start": s.start, "end": s.end, "text": s.text.strip(),
                      **({"speaker": s.speaker} if s.speaker else {})} for s in segments],
        "words": [{"word": w.word, "start": w.start, "end": w.end, "emitted_at": w.emitted_at,
                   "probability": w.probability, **({"speaker": w.speaker} if w.speaker else {})} for w in words],
    }
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
