"""Stream and transcribe every English dev item with one model, dump the texts and word times
as JSON: ``python benchmarks/dev_texts.py --model tiny.en --out texts.json [--device cpu]``.

The before/after check of a change that must not move CPU text (the GPU work, issue 51), and the
GPU check's GPU-versus-CPU comparison (:mod:`benchmarks.gpu_check`) read the same dump."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def dev_items(manifest: str | Path, language: str = "en") -> list[dict]:
    """The manifest's items of ``language``, each with an absolute ``audio`` path."""
    path = Path(manifest)
    path = path / "manifest.jsonl" if path.is_dir() else path
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for item in items:
        item["audio"] = str((path.parent / item["audio"]).resolve())
    return [i for i in items if i.get("language", "en") == language]


def words_of(words) -> list[list]:
    return [[w.word, round(float(w.start), 3), round(float(w.end), 3)] for w in words]


def item_texts(model, audio: np.ndarray, chunk_ms: int | None = None) -> dict:
    """One item: the stream's text and words (``model.stream()`` fed chunk by chunk) and the
    offline text and words (greedy, word timestamps, as ``susurrus bench``'s reference)."""
    stream = model.stream(chunk_ms=chunk_ms)
    block = stream.config.chunk_ms * 16
    for i in range(0, len(audio), block):
        stream.feed(audio[i:i + block])
    stream.finish()
    segments, _ = model.transcribe(audio, beam_size=1, word_timestamps=True)
    segments = list(segments)
    return {"stream": stream.text, "stream_words": words_of(stream.words),
            "offline": " ".join(s.text.strip() for s in segments),
            "offline_words": words_of(w for s in segments for w in s.words or [])}


def dev_texts(model, items: list[dict], progress: bool = True, lines: Path | None = None) -> dict[str, dict]:
    """Every item's texts; with ``lines``, each also appended to that file as it is done (JSON
    lines: a run cut short keeps what it did)."""
    from susurrus.audio.io import decode_audio

    out = {}
    for n, item in enumerate(items, 1):
        t0 = time.perf_counter()
        out[item["id"]] = {**item_texts(model, decode_audio(item["audio"])), "reference": item["text"]}
        if lines is not None:
            with open(lines, "a") as f:
                f.write(json.dumps({"id": item["id"], **out[item["id"]]}) + "\n")
        if progress:
            print(f"[{n}/{len(items)}] {item['id']} {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return out


def main() -> None:
    from susurrus.api import load_model
    from susurrus.evaluation.data import SHARED_DATA

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--manifest", default=str(SHARED_DATA / "dev"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None, help="passed to load_model when given")
    ap.add_argument("--compute-type", default="auto")
    ap.add_argument("--limit", type=int, default=0, help="the first N items only")
    ap.add_argument("--shortest-first", action="store_true", help="in order of duration")
    ap.add_argument("--lines", default=None, help="also append each item's texts to this JSON-lines file")
    a = ap.parse_args()
    kw = {"compute_type": a.compute_type} | ({"device": a.device} if a.device else {})
    model = load_model(a.model, **kw)
    items = dev_items(a.manifest)
    if a.shortest_first:
        items.sort(key=lambda i: i["duration_s"])
    items = items[:a.limit or None]
    Path(a.out).write_text(json.dumps(dev_texts(model, items, lines=Path(a.lines) if a.lines else None), indent=1))


if __name__ == "__main__":
    main()
