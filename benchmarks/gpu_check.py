"""The prepared GPU check (issues 51, 69): one short run on a machine with an NVIDIA GPU, no
network and no ``pip install``, from a compact copy of the weights and audio it needs.

Prepare (here, on a CPU, with the project's environment; writes < 60 MB)::

    python benchmarks/gpu_check.py --prepare gpu_data

``gpu_data/`` then holds tiny.en (a Hugging Face directory: config, tokenizer, weights; the
weights in float16 when they fit the 60 MB, else every matrix in int8 with a float16 scale per
row, ~40 MB, turned back into a float16 ``model.safetensors`` in a temporary folder at run time,
which ``load_model`` loads: the CPU and the GPU runs of the check read the same weights),
the English dev set (49 items, FLAC, 16 kHz, with its manifest) and the multilingual tokenizers
the random-init shapes need. base does not fit beside tiny.en: it runs as a random-init shape
only, as large-v3-turbo and large-v3 do (fixed seed, the alignment heads of the OpenAI
checkpoint of each shape, language "en": their cost, not their text).

Run (on the GPU machine; ``--quick --device cpu`` checks the script on a CPU in a few minutes)::

    python benchmarks/gpu_check.py --data gpu_data --out gpu_check.json
    python benchmarks/gpu_check.py --data gpu_data --skip sweep,server   # a part of it

First one line names whatever the run lacks (torch seeing no GPU, soundfile, safetensors,
pytest, starlette/uvicorn/websockets, nvidia-smi: optional); the parts that need it are skipped.
Then the parts, in order, each printing its rows of one markdown table and rewriting the JSON
file as soon as it has them (a run killed at its limit keeps what it printed):

- tests: ``pytest -m cuda tests/test_device.py`` (without the project's addopts; the output's
  tail kept when it fails);
- dev: the dev set streamed and transcribed with tiny.en on the GPU (float32 and bfloat16) and
  on the CPU (float32), item by item: texts, WER and word times compared;
- latency: one stream's steps per shape (tiny.en, base, large-v3-turbo, large-v3), the model's
  GPU memory;
- sweep: concurrent streams per shape (stepped together, ``model.streams()``, each looping its
  recording), whether every round finished before the next audio was due and what memory each
  stream took; an out-of-memory ends that one count (``oom``);
- server: ``susurrus serve --device cuda`` with 64 real-time tiny.en sessions of 12-24 s
  (benchmarks/server_concurrency.py); each client gives up at its own limit.

Every part is guarded (a part that fails, ``SystemExit`` included, is a row saying why and the
next one runs) and has a deadline: ``--budget`` seconds for the whole check, counted from its
start, shared among the parts that run in proportion to ``SHARES`` (the time a part leaves
unused goes to the ones after it); a part past its deadline stops its loop (dev items, shapes,
stream counts, sweep rounds, the clients' limits, the comparisons) and reports what it did.

The default budget, 420 s, is sized for the whole check to end within 8 minutes on an H100.
Estimated, not measured (no GPU was lent while this was written), part by part; the shares are
these estimates: start-up ~15 s (torch, CUDA, the int8 weights back to float16, counted in the
budget); tests 45 s (a pytest process: collection, CUDA start-up, then tiny.en on jfk, 11 s of
audio, offline and streamed in four compute types); dev 85 s (352 s of audio, three runs: the
CPU float32 run at ~0.33 core-s per audio-s, stream ~0.1 + offline greedy ~0.23 (docs/
benchmarks.md's headline), ~30-40 s on 16 cores; each GPU run launch-bound, ~550 steps of 640 ms
at ~20-30 ms plus the offline passes, ~20-25 s); latency 35 s (4 shapes: a 10 s warm pass, then
30 s timed, 47 steps of at most ~0.1-0.2 s for large-v3); sweep 160 s (4 shapes x 6 counts x
10 rounds of 640 ms when held, ~7 s a count with opening the streams; a count not held ends the
shape, the deadline cuts the rest); server 95 s (the server's start ~15 s, the clients' 12-24 s,
then their texts alone at ~1 s a client, as many as the deadline allows). A part passes its
deadline by at most its unit of work (one dev item in three runs, ~10 s for the 44 s item; one
sweep round; the server's stop, at most 30 s; the server part does not start with less than its
clients' audio + 10 s left): ~440-460 s in all, under 480 s. ``--quick --device cpu`` took 46 s
on a shared 2-core machine.
Figures: pending a GPU session (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

LIMIT_MB = 60.0
PARTS = ("tests", "dev", "latency", "sweep", "server")
SHARES = {"tests": 45, "dev": 85, "latency": 35, "sweep": 160, "server": 95}  # seconds of the default budget
BUDGET_S = float(sum(SHARES.values()))
MODULES = {  # module -> the parts that need it (all of them: the audio and tiny.en's weights)
    "numpy": PARTS, "torch": PARTS, "soundfile": PARTS, "safetensors": PARTS, "pytest": ("tests",),
    "starlette": ("server",), "uvicorn": ("server",), "websockets": ("server",)}
DEVICE_PARTS = ("dev", "latency", "sweep", "server")  # the tests run without a GPU (they say they skip)


# ------------------------------------------------------------------------------- prepare

def _quantize_rows(t):
    """int8 rows and a float16 scale per row (torch tensors)."""
    import torch

    rows = t.float().reshape(t.shape[0], -1)
    scale = (rows.abs().amax(1, keepdim=True) / 127).clamp_min(1e-12)
    return (rows / scale).round().clamp(-127, 127).to(torch.int8).reshape(t.shape), scale.half()


def prepare(out: Path, weights: str = "auto") -> int:
    """Write the compact copy (module docstring); returns its size in bytes."""
    import soundfile as sf
    from dev_texts import dev_items
    from safetensors.torch import load_file, save_file

    from susurrus.audio.io import decode_audio
    from susurrus.evaluation.data import SHARED_DATA
    from susurrus.model.loading import export_hf, load_weights
    from susurrus.model.vocabulary import tokenizer_json

    out.mkdir(parents=True, exist_ok=True)
    tiny = out / "tiny.en"
    export_hf(load_weights("tiny.en"), tiny)
    state = load_file(str(tiny / "model.safetensors"))
    half = {k: v.half().contiguous() for k, v in state.items()}
    fp16_mb = sum(v.numel() * 2 for v in half.values()) / 2**20
    if weights == "float16" or (weights == "auto" and fp16_mb < LIMIT_MB - 12):
        save_file(half, str(tiny / "model.safetensors"), metadata={"format": "pt"})
    else:
        packed = {}
        for k, v in state.items():
            if v.ndim >= 2:
                packed[k], packed[k + ".__row_scale"] = _quantize_rows(v)
            else:
                packed[k] = v.half().contiguous()
        save_file(packed, str(tiny / "weights.q8.safetensors"))
        (tiny / "model.safetensors").unlink()
        print(f"tiny.en in float16 is {fp16_mb:.0f} MB: matrices stored int8 with a float16 scale per row",
              file=sys.stderr)
    dev = out / "dev"
    (dev / "audio").mkdir(parents=True, exist_ok=True)
    lines = []
    for item in dev_items(SHARED_DATA / "dev"):
        sf.write(str(dev / "audio" / f"{item['id']}.flac"), decode_audio(item["audio"]), 16000, subtype="PCM_16")
        keep = {k: item[k] for k in ("id", "text", "duration_s", "language")}
        lines.append(json.dumps({**keep, "audio": f"audio/{item['id']}.flac"}))
    (dev / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    (out / "tokenizers").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as empty:
        for n_vocab in (51865, 51866):
            text, _ = tokenizer_json(Path(empty), n_vocab)
            (out / "tokenizers" / f"{n_vocab}.json").write_text(text)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {size / 2**20:.1f} MB ({'under' if size < LIMIT_MB * 2**20 else 'OVER'} {LIMIT_MB:.0f} MB)")
    return size


# ------------------------------------------------------------------------------- the run

def requirements(device: str, parts: list[str] | tuple[str, ...] = PARTS) -> tuple[dict[str, tuple[str, ...]], str]:
    """What the run lacks -> the parts it rules out, and the one line that says so."""
    missing: dict[str, tuple[str, ...]] = {}
    for name, needs in MODULES.items():
        if not set(needs) & set(parts):
            continue
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - absent, or present and broken (soundfile without libsndfile)
            missing[name if isinstance(err, ImportError) else f"{name} ({type(err).__name__})"] = needs
    if device.startswith("cuda") and "torch" not in missing:
        import torch

        if not torch.cuda.is_available():
            missing[f"a CUDA GPU (torch {torch.__version__} sees none)"] = DEVICE_PARTS
    said = [f"{name} (skips {', '.join(p for p in needs if p in parts)})" for name, needs in missing.items()]
    if shutil.which("nvidia-smi") is None and device.startswith("cuda"):
        said.append("nvidia-smi (optional: no driver version)")
    return missing, "requirements: " + ("missing " + "; ".join(said) if said else "all present")


class Budget:
    """``total_s`` from ``start`` shared among ``parts`` in proportion to their ``SHARES``; a part
    asks for its deadline when it starts and gets its share of the time left then."""

    def __init__(self, total_s: float, parts: list[str], start: float):
        self.end = start + total_s
        self.left = {p: SHARES[p] for p in parts}

    def deadline(self, part: str) -> float:
        now = time.monotonic()
        weight = self.left.pop(part)
        return now + max(0.0, self.end - now) * weight / (weight + sum(self.left.values()))

    def drop(self, part: str) -> None:
        self.left.pop(part, None)


class Report:
    """The table's rows, printed (and flushed) as they come; the JSON rewritten at each."""

    def __init__(self, out: Path, stream: TextIO | None = None):
        self.out, self.stream, self.data = out, stream or sys.stdout, {}
        print("| check | result |\n|---|---|", file=self.stream, flush=True)

    def __call__(self, key: str, value: Any, many: bool = False) -> None:
        if many:
            self.data.setdefault(key, []).append(value)
        else:
            self.data[key] = value
        cell = json.dumps(value, default=str).replace("|", "\\|").replace("\\n", " / ")
        print(f"| {key} | {cell} |", file=self.stream, flush=True)
        self.write()

    def write(self) -> None:
        tmp = self.out.with_name(self.out.name + ".tmp")
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.data, indent=1, default=str))
            os.replace(tmp, self.out)
        except OSError as err:  # the table still prints
            print(f"{self.out}: not written: {err}", file=sys.stderr, flush=True)


LABELS = {"tests": "cuda tests", "dev": "dev set, tiny.en vs cpu float32", "latency": "one stream's step",
          "sweep": "streams together", "server": "server"}


def environment(report: Report, device: str, quick: bool, budget: float) -> None:
    try:
        import torch

        report("torch", torch.__version__)
        report("cuda", torch.version.cuda)
        if device.startswith("cuda") and torch.cuda.is_available():
            report("device", torch.cuda.get_device_name(0))
        else:
            report("device", device)
    except Exception as err:  # noqa: BLE001
        report("torch", {"failed": f"{type(err).__name__}: {err}"[:300]})
    if device.startswith("cuda") and shutil.which("nvidia-smi"):
        try:
            report("driver", subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=30).stdout.strip())
        except (OSError, subprocess.SubprocessError) as err:
            report("driver", {"failed": f"{type(err).__name__}: {err}"[:300]})
    report("quick", quick)
    report("budget_s", budget)


def run_parts(a: argparse.Namespace, parts: list[str], missing: dict[str, tuple[str, ...]], report: Report,
              t_start: float) -> dict[str, float]:
    """Each part in turn, guarded, against its deadline; the seconds each took."""
    budget = Budget(a.budget, parts, t_start)
    broken = ""
    try:
        import gpu_check_parts as gp
    except Exception as err:  # noqa: BLE001 - then every part says so
        gp, broken = None, f"{type(err).__name__}: {err}"[:300]
    ctx = gp.Context(Path(a.data), a.device, a.quick, report) if gp is not None else None
    seconds: dict[str, float] = {}
    for part in parts:
        lacking = [name for name, needs in missing.items() if part in needs]
        if lacking or gp is None:
            budget.drop(part)
            report(LABELS[part], {"skipped": f"missing {', '.join(lacking)}"} if lacking else {"failed": broken})
            continue
        deadline, t0 = budget.deadline(part), time.monotonic()
        try:
            getattr(gp, f"{part}_part")(ctx, deadline)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - SystemExit too: a part that fails is its row
            report(LABELS[part], {"failed": gp.one_line(err)})
        seconds[part] = round(time.monotonic() - t0, 1)
        print(f"{part}: {seconds[part]:.0f} s (deadline was {deadline - t0:.0f} s)", file=sys.stderr, flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="DIR", help="write the compact copy of weights and audio to DIR and stop")
    ap.add_argument("--weights", choices=["auto", "float16", "int8"], default="auto", help="with --prepare")
    ap.add_argument("--data", default="gpu_data", help="the prepared copy (default: %(default)s)")
    ap.add_argument("--device", default="cuda", help="the device checked (default: %(default)s)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--quick", action="store_true", help="small sizes: check the script itself (on a CPU)")
    ap.add_argument("--budget", "--budget-s", dest="budget", type=float, default=BUDGET_S,
                    help="seconds for the whole check, shared among its parts (default: %(default)s)")
    ap.add_argument("--skip", default="", help=f"comma-separated parts left out: {','.join(PARTS)}")
    a = ap.parse_args(argv)
    if a.prepare:
        return 0 if prepare(Path(a.prepare), a.weights) < LIMIT_MB * 2**20 else 1
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    if skip - set(PARTS):
        ap.error(f"--skip: unknown part(s) {', '.join(sorted(skip - set(PARTS)))}; the parts: {', '.join(PARTS)}")
    t_start = time.monotonic()
    parts = [p for p in PARTS if p not in skip]
    missing, line = requirements(a.device, parts)
    print(line, flush=True)
    report = Report(Path(a.out))
    report.data["requirements"] = line
    environment(report, a.device, a.quick, a.budget)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a kill at the time limit stops the server too
    try:
        seconds = run_parts(a, parts, missing, report, t_start)
    except KeyboardInterrupt as err:
        report("interrupted", f"{err or 'Ctrl+C'} after {time.monotonic() - t_start:.0f} s")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    report("seconds", {"total": round(time.monotonic() - t_start), **seconds})
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl+C: no part's guard takes it for the part's failure, and the parts' own
    clean-up (the server stopped, pytest killed) runs before the check ends."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
