"""Manifests of recorded speech (JSON lines: id, audio, text, language, duration_s, ...)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

# Real speech lives beside the checkout (../shared/data); SUSURRUS_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("SUSURRUS_DATA",
                                  Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@dataclass
class Item:
    id: str
    audio: Path
    text: str
    language: str
    duration_s: float
    approximate: bool = False
    segments: list[dict] = field(default_factory=list)


def read_manifest(path: str | Path) -> list[Item]:
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.jsonl"
    items = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        items.append(Item(id=d["id"], audio=(path.parent / d["audio"]).resolve(), text=d["text"],
                          language=d.get("language", "en"), duration_s=float(d.get("duration_s", 0)),
                          approximate=d.get("text_confidence") == "approximate",
                          segments=d.get("segments", [])))
    return items
