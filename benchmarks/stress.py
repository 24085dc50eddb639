"""Conditions the data does not hold, built from the dev set's English items, through ``susurrus bench``.

Each English item of ``--data`` (``../shared/data/dev`` unless told) is written again under each
condition (``susurrus.evaluation.degrade``), with its reference text, into ``--out`` (a new
temporary folder unless told; nothing is written into the repository), and ``susurrus bench``
runs over the result with the arguments after ``--``: per condition, stream and offline WER, the
stream's agreement with offline, latency, lost words, loops and the longest commit delay.

    python benchmarks/stress.py -- --presets medium --phases 0 --json /tmp/stress.json
    python benchmarks/stress.py --conditions reverb --out /tmp/reverb -- --lookahead-ms 2000

Conditions: ``fast`` (x1.25, pitch up), ``slow`` (x0.8), ``reverb`` (a room, RT60 0.6 s),
``overlap`` (another dev item underneath, 10 dB down), ``pause`` (4 s of near silence in the
middle of the sentence), ``clipped`` (+18 dB, clipped at full scale).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from susurrus.audio.features import SAMPLE_RATE
from susurrus.audio.io import decode_audio
from susurrus.evaluation import degrade
from susurrus.evaluation.data import SHARED_DATA, read_manifest

CONDITIONS = {
    "fast": ("fast x1.25", lambda a, other: degrade.faster(a, 1.25)),
    "slow": ("slow x0.8", lambda a, other: degrade.faster(a, 0.8)),
    "reverb": ("reverb RT60 0.6 s", lambda a, other: degrade.reverberate(a, 0.6)),
    "overlap": ("other talker -10 dB", lambda a, other: degrade.under(a, other, -10.0)),
    "pause": ("pause 4 s mid-sentence", lambda a, other: degrade.pause_inside(a, 4.0)),
    "clipped": ("clipped (+18 dB)", lambda a, other: degrade.clipped(a, 18.0)),
}


def build(data: Path, out: Path, conditions: list[str]) -> int:
    """Write the items of every condition and their manifest into ``out``; returns their count."""
    items = [i for i in read_manifest(data) if i.language == "en" and i.text]
    (out / "audio").mkdir(parents=True, exist_ok=True)
    lines = []
    for k, item in enumerate(tqdm(items, desc="building", unit="item")):
        audio = decode_audio(item.audio)
        other = decode_audio(items[(k + 7) % len(items)].audio)  # another recording, not its neighbour
        for name in conditions:
            label, make = CONDITIONS[name]
            made = make(audio, other)
            sf.write(out / "audio" / f"{name}_{item.id}.wav", np.clip(made, -1.0, 1.0), SAMPLE_RATE, subtype="PCM_16")
            lines.append(json.dumps({"id": f"{name}_{item.id}", "audio": f"audio/{name}_{item.id}.wav",
                                     "text": item.text, "duration_s": round(len(made) / SAMPLE_RATE, 3),
                                     "language": "en", "condition": label}))
    (out / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED_DATA / "dev"), help="a manifest folder (default: %(default)s)")
    ap.add_argument("--out", default=None, help="where to write the items (default: a new temporary folder)")
    ap.add_argument("--conditions", default=",".join(CONDITIONS),
                    help="comma-separated, of: " + ", ".join(CONDITIONS) + " (default: all)")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: arguments for susurrus bench")
    args = ap.parse_args()
    conditions = [c for c in args.conditions.split(",") if c]
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        ap.error(f"unknown condition(s) {', '.join(unknown)}; choose from {', '.join(CONDITIONS)}")
    data = Path(args.data)
    if not (data / "manifest.jsonl").exists():
        ap.error(f"no manifest.jsonl in {data}")
    out = Path(args.out or tempfile.mkdtemp(prefix="susurrus-stress-"))
    n = build(data, out, conditions)
    print(f"{n} items in {out}", flush=True)
    extra = [a for a in args.bench_args if a != "--"]
    sys.exit(subprocess.call([sys.executable, "-m", "susurrus", "bench", str(out), *extra]))


if __name__ == "__main__":
    main()
