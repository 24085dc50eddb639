"""Where the multilingual ``base`` model loses when streamed: the engine beside its oracles.

On the English items of a manifest (``../shared/data/dev`` by default: 49 items), with
``susurrus.load_model("base")``, English forced, one torch thread, the audio fed in 640 ms
pieces as fast as it computes, side by side:

* **stream rows**, one per ``--config`` (``key=value,...`` ``StreamConfig`` overrides; repeat
  the option for more rows; ``default`` is the engine as ``model.stream(language="en")``):
  the engine's incremental encoder (block-causal over a key/value cache, ``lookahead_ms`` of
  bidirectional tail, the silence encoded once behind the audio), its decoder and AlignAtt
  commit policy. ``lookahead_ms`` may go up to 30000 here (``StreamConfig`` stops at 5000; the
  benchmark sets it after validation): the whole window re-encoded in both directions at every
  step. Two pseudo-keys choose the oracle encoder instead: ``encoder=padded`` (``pad=floor``
  or ``pad=zero``) decodes, with the same policy, over the encoder output of the whole window
  padded to 30 s and encoded at once at every step, what offline Whisper reads
  (``susurrus.evaluation.diagnosis.PaddedWindowSession``); ``silence=LEVEL`` keeps the
  engine's encoder but encodes the silence behind the audio from another constant normalised
  log-mel level (the engine's ``SILENCE_LEVEL``: -0.7 since b9fab33, the floor under speech
  peaking at ~1.2; 0 before). Each stream row is named with the engine's version (the last
  commit of ``susurrus/{audio,model,decoding,streaming}``), so that ``--reuse`` never mixes
  rows of two engines;
* **SimulStreaming**: its AlignAtt policy as published, whisperlivekit's ``simulstreaming``
  backend at its defaults on the same weights (``susurrus.evaluation.simulstreaming``; skipped
  with ``--no-simul`` or when whisperlivekit is not installed);
* **offline**: the same model offline, greedy with the temperature fallback, as ``susurrus
  transcribe --beam-size 1`` (its cost: that transcription, without word timestamps).

Columns: WER % (Whisper's English normaliser, digits spelled), the offline greedy WER % of the
same items, mean and p90 word latency, core-seconds per audio-second (``time.process_time``
of the whole stream, voice activity detector included) and the items whose committed words
hold a loop (a phrase of 1-8 words three times back to back, where the reference has none).
Latency is in audio time: for each committed word, the audio fed when it was committed minus
the end of the same word in the offline transcription (word timestamps, matched by
alignment; words the offline text does not have count for nothing). A second table says where
the errors lie: substitutions, deletions, insertions, on the first 3 and last 3 reference
words, insertions after the last reference word (invented continuations) and reference words
deleted at the very end (lost endings). (Whisper's normaliser drops text in brackets, also
from the references: on the dev set LJ001-0024 loses its 16-word parenthesis, which every
system then "inserts" after the reference's end: 16 of each row's invented words.)

    PYTHONPATH=. python benchmarks/diagnostics/base_diagnosis.py [--limit N] [--json out.json]
        [--config default --config lookahead_ms=30000 --config encoder=padded ...] [--no-simul]
        [--reuse earlier.json ...] [--table-only]

Without ``--config``: the engine at its default, without the silence context, as it was before
b9fab33 (1.5 s look-ahead, the pad at log-mel 0 encoded on its own), with the look-ahead over
the whole window, and the padded-window oracle. 49 items (352 s) take ~60 core-minutes, SimulStreaming
~30 of them (it encodes 30 s at every update) and the padded oracle ~17: ``--json`` after a
run, then ``--reuse`` it to add rows without running the others again.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation import health
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.diagnosis import (
    ErrorProfile,
    build_config,
    error_profile,
    parse_overrides,
    session_class,
)
from susurrus.evaluation.metrics import error_counts
from susurrus.evaluation.reference import offline_reference
from susurrus.evaluation.viewer import word_latencies
from susurrus.streaming.session import silence_cross_kv
from susurrus.streaming.vad import load_vad
from susurrus.types import Word

DEFAULT_CONFIGS = ["default", "silence_context_ms=0", "lookahead_ms=1500,silence_context_ms=0,silence=0",
                   "lookahead_ms=30000", "encoder=padded"]
CHUNK_MS = 640
ENGINE_DIRS = ("audio", "model", "decoding", "streaming")
OFFLINE = "offline greedy (beam 1, fallback)"
SIMUL = "SimulStreaming (whisperlivekit 0.2.26)"


@dataclass
class ItemRun:
    id: str
    audio_s: float
    text: str
    errors: int
    reference_words: int
    cpu_s: float
    latencies: list[float] = field(default_factory=list)
    repetition: int = 0
    loop: bool = False
    profile: ErrorProfile = field(default_factory=ErrorProfile)


@dataclass
class SystemRun:
    name: str
    description: str
    items: list[ItemRun] = field(default_factory=list)

    def wer(self) -> float:
        return 100.0 * sum(i.errors for i in self.items) / max(1, sum(i.reference_words for i in self.items))

    def cost(self) -> float:
        return sum(i.cpu_s for i in self.items) / max(1e-9, sum(i.audio_s for i in self.items))

    def latencies(self) -> list[float]:
        return [x for i in self.items for x in i.latencies]

    def profile(self) -> ErrorProfile:
        total = ErrorProfile()
        for i in self.items:
            total.add(i.profile)
        return total


def load_runs(paths: list[str], ids: list[str]) -> tuple[dict[str, SystemRun], dict[str, list[Word]]]:
    """The rows of earlier ``--json`` outputs that cover every item of ``ids``, by name (a later
    file's row replaces an earlier one of the same name), in their order, and the offline word
    times."""
    runs: dict[str, SystemRun] = {}
    words: dict[str, list[Word]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        words.update({k: [Word(**w) for w in v] for k, v in data["offline_words"].items()})
        for system in data["systems"]:
            by_id = {d["id"]: d for d in system["items"]}
            if all(i in by_id for i in ids) and (system["name"] != OFFLINE or all(i in words for i in ids)):
                items = [ItemRun(**{**by_id[i], "profile": ErrorProfile(**by_id[i]["profile"])}) for i in ids]
                runs[system["name"]] = SystemRun(system["name"], system["description"], items)
    return runs, words


def score(item, audio_s: float, text: str, words: list, cpu_s: float, offline_words) -> ItemRun:
    errors, n = error_counts(item.text, text, "en")
    reps = health.longest_repetition([w.word for w in words]) if words else health.longest_repetition(text.split())
    ref_reps = health.longest_repetition(item.text.split())
    lat = word_latencies(words, offline_words) if offline_words is not None else []
    return ItemRun(item.id, audio_s, text.strip(), errors, n, round(cpu_s, 3), [round(x, 3) for x in lat], reps,
                   reps >= 3 and reps > ref_reps, error_profile(item.text, text))


_SILENCES: dict[float, list] = {}  # silence_cross_kv per level


def stream_engine(net, tokenizer, audio: np.ndarray, spec: str, silence, vad):
    overrides = parse_overrides(spec)
    config = build_config(overrides, language="en")
    if "silence" in overrides:
        level = float(overrides["silence"])
        if level not in _SILENCES:
            _SILENCES[level] = silence_cross_kv(net, level)
        silence = _SILENCES[level]
    session = session_class(overrides)(net, tokenizer, config, silence, vad)
    block = CHUNK_MS * 16
    c0 = time.process_time()
    for i in range(0, len(audio), block):
        session.feed(audio[i:i + block])
    session.finish()
    return session.text, list(session.words), time.process_time() - c0


def _fmt(x: float, digits: int = 2) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def table(runs: list[SystemRun], offline: SystemRun) -> str:
    lines = ["| system | WER % | offline greedy WER % | latency mean s | p90 s | core-s / audio-s "
             "| items with a loop |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        lat = r.latencies()
        mean = float(np.mean(lat)) if lat else float("nan")
        p90 = float(np.percentile(lat, 90)) if lat else float("nan")
        loops = sum(i.loop for i in r.items)
        lines.append(f"| {r.name} | {r.wer():.2f} | {offline.wer():.2f} | {_fmt(mean)} | {_fmt(p90)} "
                     f"| {r.cost():.3f} | {loops} |")
    lines += ["", "| system | substitutions | deletions | insertions | on the first 3 words | on the last 3 words "
              "| invented continuation (words) | lost ending (words) |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        p = r.profile()
        lines.append(f"| {r.name} | {p.substitutions} | {p.deletions} | {p.insertions} | {p.opening} | {p.ending} "
                     f"| {p.tail_insertions} | {p.lost_tail} |")
    return "\n".join(lines)


def worst(runs: list[SystemRun], offline: SystemRun, n: int) -> str:
    """Per system, the ``n`` items with the most errors beyond offline."""
    off = {i.id: i for i in offline.items}
    out = []
    for r in (r for r in runs if r.name != OFFLINE):
        ranked = sorted(r.items, key=lambda i: i.errors - off[i.id].errors, reverse=True)[:n]
        out += ["", f"Worst items, {r.name} (errors beyond offline):"]
        out += [f"  {i.id}: +{i.errors - off[i.id].errors}  stream: {i.text!r}\n"
                f"  {' ' * len(i.id)}      offline: {off[i.id].text!r}" for i in ranked]
    return "\n".join(out)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_json(path: str | None, args, items, audio, offline_words, runs: list[SystemRun]) -> None:
    if not path:
        return
    out = {"manifest": args.manifest, "model": args.model, "chunk_ms": CHUNK_MS, "items": [
        {"id": i.id, "reference": i.text, "audio_s": len(audio[i.id]) / 16000} for i in items],
        "offline_words": {k: [asdict(w) for w in v] for k, v in offline_words.items()},
        "systems": [{"name": r.name, "description": r.description, "wer": r.wer(), "cost": r.cost(),
                     "items": [asdict(i) for i in r.items]} for r in runs]}
    Path(path).write_text(json.dumps(out, indent=1))


def run_offline(model, items, audio, offline_words: dict) -> SystemRun:
    """(d): the CLI's transcription (text, cost) and, into ``offline_words``, the word times
    latency is measured against (a second transcription, with word timestamps)."""
    run = SystemRun(OFFLINE, "susurrus transcribe --beam-size 1")
    for k, item in enumerate(items, 1):
        c0 = time.process_time()
        segments, _ = model.transcribe(audio[item.id], beam_size=1, language="en")
        text = " ".join(s.text.strip() for s in segments)
        cpu = time.process_time() - c0
        _, offline_words[item.id] = offline_reference(model, audio[item.id], "en")
        run.items.append(score(item, len(audio[item.id]) / 16000, text, [], cpu, None))
        log(f"[offline {k}/{len(items)}] {item.id}: {run.items[-1].errors} errors, {cpu:.1f} core-s")
    return run


@functools.lru_cache(maxsize=1)
def engine_version() -> str:
    """The last commit of the engine's code (what a stream row's numbers depend on)."""
    root = Path(susurrus.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h", "--", *(str(root / d) for d in ENGINE_DIRS)],
                             cwd=root, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def row_name(spec: str) -> str:
    return f"{spec} @{engine_version()}"


def run_stream(model, spec: str, items, audio, offline_words, silence, vad) -> SystemRun:
    run = SystemRun(row_name(spec), "susurrus stream")
    for k, item in enumerate(items, 1):
        text, words, cpu = stream_engine(model.net, model.tokenizer, audio[item.id], spec, silence, vad)
        run.items.append(score(item, len(audio[item.id]) / 16000, text, words, cpu, offline_words[item.id]))
        log(f"[{spec} {k}/{len(items)}] {item.id}: {run.items[-1].errors} errors, {cpu:.1f} core-s")
    log(f"[{spec}] WER {run.wer():.2f} %, {run.cost():.3f} core-s / audio-s")
    return run


def run_simul(model, items, audio, offline_words) -> SystemRun | None:
    try:
        from susurrus.evaluation.simulstreaming import SimulStreaming, alignment_heads_of, export_checkpoint
    except ImportError as err:
        log(f"skipping SimulStreaming: {err}")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = export_checkpoint(model, tmp, model.name)
        simul = SimulStreaming(checkpoint, "en", alignment_heads_of(model, model.name))
    run = SystemRun(SIMUL, json.dumps(simul.settings))
    for k, item in enumerate(items, 1):
        words, cpu = simul.stream(audio[item.id], CHUNK_MS)
        text = "".join(w.word for w in words)
        run.items.append(score(item, len(audio[item.id]) / 16000, text, words, cpu, offline_words[item.id]))
        log(f"[simul {k}/{len(items)}] {item.id}: {run.items[-1].errors} errors, {cpu:.1f} core-s")
    log(f"[simul] WER {run.wer():.2f} %, {run.cost():.3f} core-s / audio-s")
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default=str(SHARED_DATA / "dev" / "manifest.jsonl"))
    ap.add_argument("--model", default="base")
    ap.add_argument("--limit", type=int, default=None, help="the first N English items only")
    ap.add_argument("--config", action="append", default=None,
                    help="a stream row: key=value,... StreamConfig overrides (repeat for more rows; "
                         f"default: {' '.join(DEFAULT_CONFIGS)})")
    ap.add_argument("--no-simul", action="store_true", help="skip SimulStreaming (whisperlivekit)")
    ap.add_argument("--worst", type=int, default=3, help="worst items printed per system")
    ap.add_argument("--json", default=None, help="write every item's texts and figures here (after each row)")
    ap.add_argument("--reuse", nargs="+", default=[],
                    help="--json files of earlier runs: their rows (and offline results) for the same items are "
                         "taken from them instead of being run again")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: print the table of every row in the --reuse files")
    args = ap.parse_args()

    torch.set_num_threads(1)
    items = [i for i in read_manifest(args.manifest) if i.language == "en"][:args.limit]
    audio = {i.id: decode_audio(i.audio) for i in items}
    if args.table_only:
        earlier, _ = load_runs(args.reuse, [i.id for i in items])
        runs = sorted(earlier.values(), key=lambda r: r.name == OFFLINE)
        report(args, items, audio, runs, earlier.get(OFFLINE), earlier.get(SIMUL))
        return
    # float32: the diagnosis table was measured so, and SimulStreaming exports its weights
    model = susurrus.load_model(args.model, compute_type="float32")
    specs = []
    for spec in args.config or DEFAULT_CONFIGS:
        try:
            parse_overrides(spec)
            specs.append(spec)
        except KeyError as err:
            log(f"skipping {spec!r}: StreamConfig has no field {err} in this checkout")

    earlier, offline_words = load_runs(args.reuse, [i.id for i in items])
    offline = earlier.get(OFFLINE) or run_offline(model, items, audio, offline_words)
    runs: list[SystemRun] = []
    silence, vad = silence_cross_kv(model.net), load_vad()
    for spec in specs:
        runs.append(earlier.get(row_name(spec)) or run_stream(model, spec, items, audio, offline_words, silence, vad))
        write_json(args.json, args, items, audio, offline_words, runs + [offline])
    simul = None if args.no_simul else (earlier.get(SIMUL) or run_simul(model, items, audio, offline_words))
    runs += [simul] if simul else []
    runs.append(offline)
    write_json(args.json, args, items, audio, offline_words, runs)

    report(args, items, audio, runs, offline, simul)


def report(args, items, audio, runs: list[SystemRun], offline: SystemRun | None, simul: SystemRun | None) -> None:
    if offline is None:
        raise SystemExit("no offline row for these items")
    audio_s = sum(len(a) for a in audio.values()) / 16000
    print(f"{len(items)} English items of {args.manifest} ({audio_s:.0f} s), model {args.model}, "
          f"{CHUNK_MS} ms pieces, 1 torch thread; latency against the offline word ends\n")
    print(table(runs, offline))
    if simul:
        print(f"\nSimulStreaming settings: {simul.description}")
    print(worst(runs, offline, args.worst))


if __name__ == "__main__":
    main()
