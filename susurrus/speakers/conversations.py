"""Conversations with known turns, assembled from distinct speakers of the shared data, for the
speaker-label benchmark (``susurrus bench --diarize``). Rebuilt from a fixed seed into a cache
folder outside the project (``~/.cache/susurrus/diarization``).

Speakers: items grouped by who speaks them. dev: LibriSpeech speakers, JFK, LJSpeech (one
reader, every chapter), AISHELL and NST speakers; hard: speechocean762 speaker ids (Mandarin L1
adults and children); multi: Thorsten (one speaker, neutral and emotional), AISHELL speakers.
Left out where one voice is not certain: the moonshine, Picovoice, LibriVox, CMU, NOIZEUS, OSR,
ReazonSpeech and ReadAlongs items. A speaker needs 8 s of audio.

A conversation of ``k`` speakers: turns of 1-20 s (a third of conversations have a run of
back-and-forth turns of 1-2.5 s), each the next stretch of its speaker's audio (cut at the
quietest 32 ms near the length drawn), pauses of 0-1.5 s; the ``overlap`` set starts turns
early so that about 10 % of the speech overlaps. The reference: each turn's Silero-VAD speech
regions (gaps under 0.25 s closed), labelled with its speaker."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from susurrus.audio.io import decode_audio

CACHE = Path.home() / ".cache" / "susurrus" / "diarization"
SR = 16000
SETS = {"2spk": (2, 10, 40.0, False), "3spk": (3, 8, 50.0, False), "4spk": (4, 8, 60.0, False),
        "2spk_overlap": (2, 6, 40.0, True)}  # name: speakers, conversations, seconds, overlap
SEED = 55


def speaker_of(item: dict, corpus: str) -> str | None:
    g = item.get("group") or ""
    if corpus == "dev":
        if g.startswith("ljspeech/"):
            return "ljspeech"
        return g if g.split("/")[0] in ("librispeech", "jfk", "aishell", "nst") else None
    if corpus == "hard":
        return g if g.startswith("speechocean762/") else None
    if corpus == "multi":
        if g.startswith("thorsten/"):
            return "thorsten"
        return g if g.startswith("aishell/") else None
    return None


def speaker_pool(data_root: Path) -> dict[str, list[Path]]:
    pool: dict[str, list[Path]] = {}
    dur: dict[str, float] = {}
    for corpus in ("dev", "hard", "multi"):
        manifest = data_root / corpus / "manifest.jsonl"
        if not manifest.exists():
            continue
        for line in manifest.read_text().splitlines():
            item = json.loads(line)
            spk = speaker_of(item, corpus)
            if spk:
                pool.setdefault(spk, []).append(data_root / corpus / item["audio"])
                dur[spk] = dur.get(spk, 0.0) + item["duration_s"]
    return {s: sorted(p) for s, p in sorted(pool.items()) if dur[s] >= 8.0}


@dataclass
class Conversation:
    name: str
    audio: np.ndarray
    turns: list[tuple[float, float, str]]  # reference speech regions: start, end, speaker

    @property
    def speakers(self) -> int:
        return len({s for _, _, s in self.turns})


def _cut(x: np.ndarray, want: int) -> int:
    """A cut near ``want`` samples at the quietest 32 ms within 0.3 s."""
    lo, hi = max(SR // 2, want - int(0.3 * SR)), min(len(x), want + int(0.3 * SR))
    if hi - lo < 512:
        return min(len(x), want)
    frames = (hi - lo) // 512
    e = (x[lo: lo + frames * 512].reshape(frames, 512) ** 2).mean(1)
    return lo + int(np.argmin(e)) * 512 + 256


def _speech_regions(x: np.ndarray, vad) -> list[tuple[float, float]]:
    from susurrus.streaming.vad import FRAME_MS, VadState, push_vad

    probs = push_vad(vad, VadState(), x, final=True)
    out: list[list[float]] = []
    for i in np.flatnonzero(probs >= 0.5):
        a, b = i * FRAME_MS / 1000, (i + 1) * FRAME_MS / 1000
        if out and a - out[-1][1] < 0.25:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, min(b, len(x) / SR)) for a, b in out]


def make_conversation(name: str, rng: random.Random, voices: dict[str, np.ndarray], k: int, seconds: float,
                      overlap: bool, vad) -> Conversation:
    names = rng.sample(sorted(voices), k)
    cursor = dict.fromkeys(names, 0)
    pieces: list[tuple[int, np.ndarray, str]] = []
    t = 0
    prev = None
    burst = rng.random() < 1 / 3
    burst_at = rng.uniform(0.2, 0.6) * seconds
    while t < seconds * SR:
        spk = rng.choice([s for s in names if s != prev] if prev else names)
        if len(pieces) < k:  # everyone speaks in the first turns
            spk = names[len(pieces)]
        in_burst = burst and burst_at * SR <= t < (burst_at + 12) * SR
        long_turn = rng.random() >= 0.7
        length = rng.uniform(1.0, 2.5) if in_burst else rng.uniform(8.0, 20.0) if long_turn else rng.uniform(1.0, 12.0)
        src = voices[spk]
        if cursor[spk] + int(length * SR) > len(src):
            cursor[spk] = 0
        seg = src[cursor[spk]:]
        seg = seg[: _cut(seg, int(length * SR))]
        cursor[spk] += len(seg)
        pause = rng.uniform(0.0, 1.5)
        start = t
        if overlap and pieces and rng.random() < 0.6:
            start = max(pieces[-1][0], t - int(min(1.5, 0.3 * len(pieces[-1][1]) / SR) * SR))
        pieces.append((start, seg, spk))
        t = start + len(seg) + int(pause * SR)
        prev = spk
    audio = np.zeros(max(s + len(x) for s, x, _ in pieces), np.float32)
    turns = []
    for s, x, spk in pieces:
        audio[s: s + len(x)] += x
        turns += [(s / SR + a, s / SR + b, spk) for a, b in _speech_regions(x, vad)]
    peak = np.abs(audio).max()
    if peak > 0.99:
        audio *= 0.99 / peak
    return Conversation(name, audio, sorted(turns))


def cache_for(seed: int) -> Path:
    """The folder of the set built from ``seed`` (the default seed's: :data:`CACHE`)."""
    return CACHE if seed == SEED else CACHE.with_name(f"{CACHE.name}_seed{seed}")


def build(data_root: Path, out: Path | None = None, sets: dict | None = None, seed: int = SEED) -> list[Path]:
    """Write every set's conversations (``NAME.wav`` + ``NAME.json`` turns) unless present;
    another ``seed`` draws other speakers, turns and pauses (a held-out set)."""
    import soundfile as sf

    from susurrus.streaming.vad import load_vad

    sets = sets or SETS
    out = out or cache_for(seed)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{s}_{i:02d}.json" for s, (_, n, _, _) in sets.items() for i in range(n)]
    if all(p.exists() for p in paths):
        return paths
    pool = speaker_pool(data_root)
    voices = {s: np.concatenate([decode_audio(str(p)) for p in files]) for s, files in pool.items()}
    vad = load_vad()
    rng = random.Random(seed)
    for set_name, (k, n, seconds, overlap) in sets.items():
        for i in range(n):
            conv = make_conversation(f"{set_name}_{i:02d}", rng, voices, k, seconds, overlap, vad)
            sf.write(out / f"{conv.name}.wav", conv.audio, SR, subtype="PCM_16")
            (out / f"{conv.name}.json").write_text(json.dumps({"name": conv.name, "turns": conv.turns}))
    return paths


def load(path: Path) -> Conversation:
    doc = json.loads(Path(path).read_text())
    return Conversation(doc["name"], decode_audio(str(Path(path).with_suffix(".wav"))),
                        [tuple(t) for t in doc["turns"]])
