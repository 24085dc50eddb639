"""The prepared GPU check (issue 51): one short run on a machine with an NVIDIA GPU, no network
and no ``pip install``, from a compact copy of the weights and audio it needs.

Prepare (here, on a CPU, with the project's environment; writes < 60 MB)::

    python benchmarks/gpu_check.py --prepare gpu_data

``gpu_data/`` then holds tiny.en (a Hugging Face directory: config, tokenizer, weights; the
weights in float16 when they fit the 60 MB, else every matrix in int8 with a float16 scale per
row, ~40 MB, turned back into a float16 ``model.safetensors`` in a temporary folder at run time,
which ``load_model`` loads: the CPU and the GPU runs of the check read the same weights),
the English dev set (49 items, FLAC, 16 kHz, with its manifest) and the multilingual tokenizers
the random-init shapes need. base does not fit beside tiny.en: it runs as a random-init shape
only, as large-v3-turbo and large-v3 do (fixed seed: their cost, not their text).

Run (on the GPU machine, ~10 minutes; ``--quick --device cpu`` checks the script on a CPU in a
few minutes)::

    python benchmarks/gpu_check.py --data gpu_data --out gpu_check.json

It runs the tests marked ``cuda``; streams and transcribes the dev set with tiny.en on the GPU
(float32 and bfloat16) and on the CPU (float32) and compares texts, WER and word times; times
one stream's steps per shape (tiny.en, base, large-v3-turbo, large-v3); sweeps concurrent
streams per shape (stepped together, ``model.streams()``), saying whether every round finished
before the next audio was due and what memory the model and each stream took; and runs
``susurrus serve --device cuda`` with 64 real-time tiny.en sessions (benchmarks/
server_concurrency.py). It prints one markdown table and writes every figure as JSON.
Figures: pending a GPU session (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import torch  # noqa: E402

from susurrus.model.whisper import ModelDims  # noqa: E402

LIMIT_MB = 60.0
SHAPES = {  # checkpoint shapes: (mels, audio ctx, width, heads, layers, vocab, text ctx, width, heads, layers)
    "tiny.en": ModelDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4),
    "base": ModelDims(80, 1500, 512, 8, 6, 51865, 448, 512, 8, 6),
    "large-v3-turbo": ModelDims(128, 1500, 1280, 20, 32, 51866, 448, 1280, 20, 4),
    "large-v3": ModelDims(128, 1500, 1280, 20, 32, 51866, 448, 1280, 20, 32),
}


# ------------------------------------------------------------------------------- prepare

def _quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def tiny_dir(data: Path) -> Path:
    """A directory ``load_model`` loads: the prepared one, or its int8 rows back in float16."""
    src = data / "tiny.en"
    if (src / "model.safetensors").exists():
        return src
    from safetensors.torch import load_file, save_file

    packed = load_file(str(src / "weights.q8.safetensors"))
    state = {k: (v.float() * packed[k + ".__row_scale"].float().reshape(-1, *([1] * (v.ndim - 1)))).half()
             if v.dtype == torch.int8 else v for k, v in packed.items() if not k.endswith(".__row_scale")}
    tmp = Path(tempfile.mkdtemp(prefix="susurrus-tiny-"))
    for f in src.iterdir():
        if f.suffix == ".json":
            (tmp / f.name).write_text(f.read_text())
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return tmp


def random_model(shape: str, device: str, compute_type: str, data: Path):
    """A randomly initialised model of ``shape`` (seed 0) on ``device``: cost only."""
    from susurrus.api import HALF, WhisperModel
    from susurrus.model.loading import LoadedModel
    from susurrus.model.whisper import Whisper

    dims = SHAPES[shape]
    torch.manual_seed(0)
    with torch.device(device):
        net = Whisper(dims)
        torch.nn.init.normal_(net.decoder.positional_embedding, std=0.02)
    net.alignment_heads = net.alignment_heads.cpu()
    if compute_type in HALF:
        net.to(HALF[compute_type])
    net.eval().requires_grad_(False)
    net.decoder.freeze()
    tok = (data / "tiny.en" / "tokenizer.json" if dims.n_vocab == 51864
           else data / "tokenizers" / f"{dims.n_vocab}.json")
    model = WhisperModel(LoadedModel(net, tok.read_text(), None, f"random {shape}"), f"random {shape}")
    model.compute_type, model.device = compute_type, str(net.device)
    return model


# ------------------------------------------------------------------------------- checks

def run_cuda_tests(data: Path, model_dir: Path) -> dict:
    """``pytest -m cuda tests/test_device.py`` on the prepared audio and weights."""
    t0 = time.perf_counter()
    env = {**os.environ, "SUSURRUS_DATA": str(data.resolve()), "SUSURRUS_TEST_TINY": str(model_dir)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                           "tests/test_device.py"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {"returncode": proc.returncode, "summary": last, "seconds": round(time.perf_counter() - t0, 1)}


def compare_dev(runs: dict[str, dict], base: str) -> dict[str, dict]:
    """Per run: WER stream/offline against the reference, texts identical to ``base``'s, and the
    word-time differences on identical texts."""
    from susurrus.evaluation.metrics import corpus_error_rate

    ref = runs[base]
    out = {}
    for name, texts in runs.items():
        row: dict = {}
        for kind in ("stream", "offline"):
            row[f"{kind}_wer"] = round(corpus_error_rate([(t["reference"], t[kind]) for t in texts.values()]), 2)
            same = [k for k in texts if texts[k][kind] == ref[k][kind]]
            row[f"{kind}_same"] = f"{len(same)}/{len(texts)}"
            row[f"{kind}_differ"] = [k for k in texts if k not in same]
            diffs = [abs(a[i] - b[i]) for k in same for a, b in zip(texts[k][f"{kind}_words"], ref[k][f"{kind}_words"])
                     for i in (1, 2)]
            row[f"{kind}_time_diff_max_ms"] = round(1000 * max(diffs, default=0.0))
        out[name] = row
    return out


def step_latency(model, audio: np.ndarray) -> dict:
    """One stream alone: the wall time of each feed that ran a step (ms), p50/p90."""
    for warm in (True, False):
        stream = model.stream()
        block = stream.config.chunk_ms * 16
        times = []
        for i in range(0, len(audio), block):
            steps = len(stream.stats)
            t0 = time.perf_counter()
            stream.feed(audio[i:i + block])
            if model.device.startswith("cuda"):
                torch.cuda.synchronize()
            if len(stream.stats) > steps:
                times.append(1000 * (time.perf_counter() - t0))
        if not warm:
            return {"steps": len(times), "p50_ms": round(float(np.percentile(times, 50)), 1),
                    "p90_ms": round(float(np.percentile(times, 90)), 1), "chunk_ms": stream.config.chunk_ms}
    return {}


def sweep_point(model, audio: list[np.ndarray], n: int, seconds: float) -> dict:
    """``n`` streams stepped together for ``seconds`` of audio at real-time pace: each round feeds
    every stream one chunk; held when every round took less than a chunk of audio."""
    cuda = model.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    batch = model.streams()
    streams = [batch.stream() for _ in range(n)]
    chunk = streams[0].config.chunk_ms
    block = chunk * 16
    rounds = []
    for i in range(0, int(seconds * 16000), block):
        t0 = time.perf_counter()
        batch.feed({s: audio[k % len(audio)][i:i + block] for k, s in enumerate(streams)})
        if cuda:
            torch.cuda.synchronize()
        rounds.append(1000 * (time.perf_counter() - t0))
    row = {"streams": n, "chunk_ms": chunk, "rounds": len(rounds),
           "round_p50_ms": round(float(np.percentile(rounds, 50)), 1),
           "round_max_ms": round(max(rounds[1:] or rounds), 1), "held": max(rounds[1:] or rounds) < chunk}
    if cuda:
        row["mib_per_stream"] = round((torch.cuda.max_memory_allocated() - before) / n / 2**20, 1)
    del batch, streams
    return row


def sweep(model, audio: list[np.ndarray], counts: list[int], seconds: float, deadline: float) -> list[dict]:
    from susurrus.api import HALF
    from susurrus.model.memory import stream_bytes

    rows = []
    for n in counts:
        if time.monotonic() > deadline:
            rows.append({"streams": n, "skipped": "time budget"})
            continue
        if model.device.startswith("cuda"):
            free, _ = torch.cuda.mem_get_info()
            need = n * stream_bytes(model.net.dims, HALF.get(model.compute_type, torch.float32),
                                    frames=int(seconds * 50) + 160).total
            if need > 0.9 * free:
                rows.append({"streams": n, "skipped": f"memory: {need / 2**30:.1f} GiB > 90 % of {free / 2**30:.1f}"})
                continue
        try:
            rows.append(sweep_point(model, audio, n, seconds))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            rows.append({"streams": n, "held": False, "error": "out of memory"})
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        if not rows[-1]["held"]:
            break  # more streams will not hold either
    return rows


def server_check(model_dir: Path, data: Path, device: str, clients: int, seconds: float) -> dict:
    import server_concurrency as sc

    import susurrus

    args = argparse.Namespace(data=str(data / "dev"), seconds=seconds, model=str(model_dir), threads=1,
                              workers=1, compute_type="auto", device=device, ws_compression=False, stagger_s=0.0)
    model = susurrus.load_model(str(model_dir), device=device)
    results = sc.chosen_audio(args, clients)
    row = sc.summary(model, results, sc.serve_and_stream(args, results, True))
    return {"clients": clients, "wall_latency_mean_s": round(float(row["mean"]), 2),
            "wall_latency_p90_s": round(float(row["p90"]), 2), "same_as_model_stream": f"{row['same']}/{clients}",
            "wer_vs_ref": round(float(row["wer_ref"]), 2), "errors": row["errors"]}


# ------------------------------------------------------------------------------- main

def table(report: dict) -> str:
    lines = ["| check | result |", "|---|---|"]
    for key, value in report.items():
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            for sub, v in value.items():
                lines.append(f"| {key}: {sub} | {json.dumps(v)} |")
        elif isinstance(value, list):
            for v in value:
                lines.append(f"| {key} | {json.dumps(v)} |")
        else:
            lines.append(f"| {key} | {json.dumps(value)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="DIR", help="write the compact copy of weights and audio to DIR and stop")
    ap.add_argument("--weights", choices=["auto", "float16", "int8"], default="auto", help="with --prepare")
    ap.add_argument("--data", default="gpu_data", help="the prepared copy (default: %(default)s)")
    ap.add_argument("--device", default="cuda", help="the device checked (default: %(default)s)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--quick", action="store_true", help="small sizes: check the script itself (on a CPU)")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="start no new part after this many seconds (default: %(default)s)")
    ap.add_argument("--skip", default="", help="comma-separated: tests,dev,latency,sweep,server")
    a = ap.parse_args()
    if a.prepare:
        return 0 if prepare(Path(a.prepare), a.weights) < LIMIT_MB * 2**20 else 1
    from dev_texts import dev_items, dev_texts

    import susurrus
    from susurrus.audio.io import decode_audio

    t_start = time.monotonic()
    deadline = t_start + a.budget_s
    data, skip = Path(a.data), set(a.skip.split(","))
    gpu = a.device.startswith("cuda")
    report: dict = {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
                    "cuda": torch.version.cuda, "quick": a.quick}
    if gpu:
        report["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                          capture_output=True, text=True).stdout.strip()
    model_dir = tiny_dir(data)
    def attempt(key: str, fn, *args):  # a part that fails is reported, the others still run
        try:
            report[key] = fn(*args)
        except Exception as err:  # noqa: BLE001
            report[key] = {"error": f"{type(err).__name__}: {err}"[:300]}

    if "tests" not in skip:
        attempt("cuda tests", run_cuda_tests, data, model_dir)
    items = dev_items(data / "dev")[: 3 if a.quick else None]
    audio = [decode_audio(i["audio"]) for i in items]
    def dev_part() -> dict:
        runs = {"cpu float32": dev_texts(susurrus.load_model(str(model_dir), device="cpu", compute_type="float32"),
                                         items, progress=False)}
        for ct in ("float32", "bfloat16") if gpu else ("bfloat16",):
            if time.monotonic() < deadline:
                model = susurrus.load_model(str(model_dir), device=a.device, compute_type=ct)
                runs[f"{a.device} {ct}"] = dev_texts(model, items, progress=False)
        return compare_dev(runs, "cpu float32")

    if "dev" not in skip:
        attempt("dev set, tiny.en vs cpu float32", dev_part)
    long_audio = np.concatenate(audio)[: 16000 * (8 if a.quick else 30)]
    shapes = ["tiny.en", "base"] if a.quick else list(SHAPES)
    ct = "bfloat16" if gpu else "float32"
    counts = [1, 4] if a.quick else [1, 16, 64, 128, 256, 400]
    for shape in shapes:
        if "latency" in skip and "sweep" in skip:
            break
        if gpu:
            torch.cuda.empty_cache()
            m0 = torch.cuda.memory_allocated()
        try:
            model = (susurrus.load_model(str(model_dir), device=a.device, compute_type=ct) if shape == "tiny.en"
                     else random_model(shape, a.device, ct, data))
            model.stream()  # the shared silence
        except Exception as err:  # noqa: BLE001 (out of memory for a shape: the others still run)
            report[f"model: {shape}"] = {"error": f"{type(err).__name__}: {err}"[:300]}
            continue
        key = f"{shape} ({'real weights' if shape == 'tiny.en' else 'random init'}, {ct})"
        if gpu:
            report[f"model MiB: {key}"] = round((torch.cuda.memory_allocated() - m0) / 2**20)
        if "latency" not in skip and time.monotonic() < deadline:
            attempt(f"one stream's step: {key}", step_latency, model, long_audio)
        if "sweep" not in skip:
            attempt(f"streams together: {key}", sweep, model, audio, counts, 2.0 if a.quick else 8.0, deadline)
        del model
    if "server" not in skip and time.monotonic() < deadline:
        attempt("server", server_check, model_dir, data, a.device, 2 if a.quick else 64, 3.0 if a.quick else 12.0)
    report["seconds"] = round(time.monotonic() - t_start)
    print(table(report))
    Path(a.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
