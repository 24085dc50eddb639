"""The parts of the prepared GPU check (benchmarks/gpu_check.py): the cuda tests, the dev set
on the GPU against the CPU, one stream's steps per shape, streams stepped together per shape,
and the server. Each part takes a :class:`Context` and a deadline (``time.monotonic()``), stops
its work when the deadline passes, and hands each row to ``ctx.emit`` as soon as it has it (the
check prints it and rewrites its JSON at once: a run killed at its time limit keeps them)."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "benchmarks")) if p not in sys.path]

from susurrus.model.shapes import SHAPES as OPENAI_SHAPES  # noqa: E402

SHAPES = {name: OPENAI_SHAPES[name] for name in ("tiny.en", "base", "large-v3-turbo", "large-v3")}  # the checked
Emit = Callable[..., None]  # emit(key, value, many=False)


def one_line(err: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line (a part's failure row)."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_oom(err: BaseException) -> bool:
    """An out-of-memory: torch's own error, a RuntimeError saying so, or a batch whose streams
    failed with one (``BatchError`` holds each stream's error)."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    if any(is_oom(e) for e in (getattr(err, "errors", None) or {}).values()):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def free_memory(cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def tiny_dir(data: Path) -> Path:
    """A directory ``load_model`` loads: the prepared one, or its int8 rows back in float16 (in
    a temporary folder, removed when the check ends)."""
    src = data / "tiny.en"
    if (src / "model.safetensors").exists():
        return src
    if not (src / "weights.q8.safetensors").exists():
        raise FileNotFoundError(f"{src}: neither model.safetensors nor weights.q8.safetensors (run --prepare)")
    from safetensors.torch import load_file, save_file

    packed = load_file(str(src / "weights.q8.safetensors"))
    state = {k: (v.float() * packed[k + ".__row_scale"].float().reshape(-1, *([1] * (v.ndim - 1)))).half()
             if v.dtype == torch.int8 else v for k, v in packed.items() if not k.endswith(".__row_scale")}
    tmp = Path(tempfile.mkdtemp(prefix="susurrus-tiny-"))
    atexit.register(shutil.rmtree, tmp, True)
    for f in src.iterdir():
        if f.suffix == ".json":
            (tmp / f.name).write_text(f.read_text())
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return tmp


@dataclass
class Context:
    """What every part reads: the prepared data, the device, the sizes, where rows go."""
    data: Path
    device: str
    quick: bool
    emit: Emit
    _model_dir: Path | None = field(default=None, repr=False)

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")

    def model_dir(self) -> Path:
        if self._model_dir is None:
            self._model_dir = tiny_dir(self.data)
        return self._model_dir

    def items(self, every: bool = False) -> list[dict]:
        """The English dev items (three with ``quick``, unless ``every``)."""
        from dev_texts import dev_items

        items = dev_items(self.data / "dev")
        return items if every or not self.quick else items[:3]

    def load(self, shape: str, compute_type: str):
        import susurrus

        if shape == "tiny.en":
            return susurrus.load_model(str(self.model_dir()), device=self.device, compute_type=compute_type)
        return random_model(shape, self.device, compute_type, self.data)


def random_model(shape: str, device: str, compute_type: str, data: Path):
    """A randomly initialised model of ``shape`` (seed 0) on ``device``, with the alignment heads
    of the OpenAI checkpoint of that shape (susurrus.model.heads): cost only, not text."""
    from susurrus.api import HALF, WhisperModel
    from susurrus.model.heads import known_heads
    from susurrus.model.loading import LoadedModel
    from susurrus.model.whisper import Whisper

    dims = SHAPES[shape]
    torch.manual_seed(0)
    with torch.device(device):
        net = Whisper(dims)
        torch.nn.init.normal_(net.decoder.positional_embedding, std=0.02)
    known = known_heads(dims)
    if known:
        net.set_alignment_heads(known[1])
    net.alignment_heads = net.alignment_heads.cpu()
    net.eval().requires_grad_(False)
    net.decoder.freeze()
    if compute_type in HALF:  # as load_model: the logits stay a float32 product
        output_t = net.decoder.output_t
        net.to(HALF[compute_type])
        net.decoder.keep_float_output(output_t)
    tok = (data / "tiny.en" / "tokenizer.json" if dims.n_vocab == 51864
           else data / "tokenizers" / f"{dims.n_vocab}.json")
    loaded = LoadedModel(net, tok.read_text(), known[1] if known else None, f"random {shape}",
                         heads_origin=f"OpenAI {known[0]} (same shape)" if known else "default")
    model = WhisperModel(loaded, f"random {shape}")
    model.compute_type, model.device = compute_type, str(net.device)
    return model


def language_of(model) -> dict[str, str]:
    """``language="en"`` for a multilingual model: no language detection per stream."""
    return {"language": "en"} if model.is_multilingual else {}


def _sync(model) -> None:
    if model.device.startswith("cuda"):
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------- tests

def tail(text: str, lines: int = 15, chars: int = 1500) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def tests_part(ctx: Context, deadline: float, target: str = "tests/test_device.py", marker: str = "cuda") -> dict:
    """``pytest -m cuda tests/test_device.py`` on the prepared audio and weights, without the
    project's addopts (``-n auto`` needs pytest-xdist); the output's tail kept when it fails."""
    t0 = time.perf_counter()
    env = {**os.environ, "SUSURRUS_DATA": str(ctx.data.resolve()), "SUSURRUS_TEST_TINY": str(ctx.model_dir())}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-m", marker, "-p", "no:cacheprovider",
           "-o", "addopts=", target]
    limit = max(5.0, deadline - time.monotonic())
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=limit, env=env)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        def text(b: Any) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        code, out, err = f"killed after {limit:.0f} s (the part's deadline)", text(e.stdout), text(e.stderr)
    row: dict[str, Any] = {"returncode": code, "summary": (out.strip().splitlines() or ["(no output)"])[-1],
                           "seconds": round(time.perf_counter() - t0, 1)}
    if code != 0:
        row["tail"] = tail(out + ("\n--- stderr\n" + err if err.strip() else ""))
    elif "skipped" in row["summary"]:  # why (on a machine where torch sees no GPU, all of them)
        row["skips"] = [line for line in out.splitlines() if line.startswith("SKIPPED")][:3]
    ctx.emit("cuda tests", row)
    return row


# ------------------------------------------------------------------------------- dev set

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


def dev_part(ctx: Context, deadline: float) -> None:
    """tiny.en's stream and offline texts per dev item on the CPU (float32, the base) and the
    device (float32, bfloat16; on a CPU: bfloat16), item by item across the runs, so that a
    deadline leaves every run with the same items."""
    from dev_texts import item_texts

    import susurrus
    from susurrus.audio.io import decode_audio

    key = "dev set, tiny.en vs cpu float32"
    names = ["cpu float32"] + ([f"{ctx.device} float32", f"{ctx.device} bfloat16"] if ctx.gpu else ["cpu bfloat16"])
    models = {}
    for name in names:
        device, compute_type = name.rsplit(" ", 1)
        try:
            models[name] = susurrus.load_model(str(ctx.model_dir()), device=device, compute_type=compute_type)
        except Exception as err:  # noqa: BLE001 - one run that cannot load: the others still compare
            if name == names[0]:
                raise
            ctx.emit(f"{key}: {name}", {"failed": one_line(err)})
    items = ctx.items()
    runs: dict[str, dict] = {name: {} for name in models}
    for item in items:
        if time.monotonic() > deadline:
            break
        audio = decode_audio(item["audio"])
        for name, model in models.items():
            runs[name][item["id"]] = {**item_texts(model, audio), "reference": item["text"]}
    done = len(runs[names[0]])
    if not done:
        raise TimeoutError("the part's deadline passed before the first item")
    for name, row in compare_dev(runs, names[0]).items():
        ctx.emit(f"{key}: {name}", {"items": f"{done}/{len(items)}", **row})


# ------------------------------------------------------------------------------- one stream

def step_latency(model, audio: np.ndarray, deadline: float, warm_s: float = 10.0) -> dict:
    """One stream alone: the wall time of each feed that ran a step (ms), p50/p90, after a warm
    pass over the first ``warm_s`` of the audio; cut short at the deadline."""
    row: dict[str, Any] = {}
    for warm in (True, False):
        stream = model.stream(**language_of(model))
        block = stream.config.chunk_ms * 16
        times = []
        for i in range(0, int(16000 * warm_s) if warm else len(audio), block):
            if time.monotonic() > deadline:
                row["cut"] = f"deadline, {'in the warm pass' if warm else f'after {i / 16000:.1f} s of audio'}"
                break
            steps = len(stream.stats)
            t0 = time.perf_counter()
            stream.feed(audio[i:i + block])
            _sync(model)
            if len(stream.stats) > steps:
                times.append(1000 * (time.perf_counter() - t0))
        if not warm and times:
            row.update({"steps": len(times), "p50_ms": round(float(np.percentile(times, 50)), 1),
                        "p90_ms": round(float(np.percentile(times, 90)), 1), "chunk_ms": stream.config.chunk_ms})
        if "cut" in row:
            break
    return row


def shapes_of(ctx: Context) -> tuple[list[str], str]:
    return (["tiny.en", "base"] if ctx.quick else list(SHAPES)), ("bfloat16" if ctx.gpu else "float32")


def shape_key(shape: str, compute_type: str) -> str:
    return f"{shape} ({'real weights' if shape == 'tiny.en' else 'random init'}, {compute_type})"


def each_shape(ctx: Context, deadline: float, run: Callable[[Any, str, float, dict], None], what: str) -> None:
    """Load each shape in turn and ``run(model, key, its deadline, {"model_mib": ...})`` (the
    model's GPU memory; empty on a CPU); the time left is shared among the shapes left, and a
    shape that fails (out of memory) is a row: the others still run."""
    shapes, compute_type = shapes_of(ctx)
    for n, shape in enumerate(shapes):
        key = f"{what}: {shape_key(shape, compute_type)}"
        if time.monotonic() > deadline:
            ctx.emit(key, {"skipped": "the part's deadline passed"})
            continue
        free_memory(ctx.gpu)
        m0 = torch.cuda.memory_allocated() if ctx.gpu else 0
        model = None
        try:
            model = ctx.load(shape, compute_type)
            model.stream()  # the shared silence
            mib = {"model_mib": round((torch.cuda.memory_allocated() - m0) / 2**20)} if ctx.gpu else {}
            run(model, key, time.monotonic() + (deadline - time.monotonic()) / (len(shapes) - n), mib)
        except Exception as err:  # noqa: BLE001 - one shape that fails: the others still run
            ctx.emit(key, {"failed": one_line(err)})
        del model
        free_memory(ctx.gpu)


def latency_part(ctx: Context, deadline: float) -> None:
    audio = np.concatenate([decode(i) for i in ctx.items()])[: 16000 * (8 if ctx.quick else 30)]
    each_shape(ctx, deadline, lambda model, key, end, mib: ctx.emit(key, {**mib, **step_latency(model, audio, end)}),
               "one stream's step")


def decode(item: dict) -> np.ndarray:
    from susurrus.audio.io import decode_audio

    return decode_audio(item["audio"])


# ------------------------------------------------------------------------------- streams together

def sweep_point(model, audio: list[np.ndarray], n: int, seconds: float, deadline: float) -> dict:
    """``n`` streams stepped together for ``seconds`` of audio at real-time pace: each round feeds
    every stream one chunk of its recording, looped for the whole point (no stream falls
    silent); held when every round after the first took less than a chunk of audio."""
    cuda = model.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    batch = model.streams()
    streams = [batch.stream(**language_of(model)) for _ in range(n)]
    chunk = streams[0].config.chunk_ms
    block = chunk * 16
    total = -(-int(seconds * 16000) // block) * block
    looped = [np.resize(a, total) for a in audio[:n]]  # each recording repeated to the point's length
    rounds: list[float] = []
    row: dict[str, Any] = {"streams": n, "chunk_ms": chunk}
    for i in range(0, total, block):
        if time.monotonic() > deadline:
            row["cut"] = f"deadline after {len(rounds)} of {total // block} rounds"
            break
        t0 = time.perf_counter()
        batch.feed({s: looped[k % len(looped)][i:i + block] for k, s in enumerate(streams)})
        _sync(model)
        rounds.append(1000 * (time.perf_counter() - t0))
    if rounds:
        worst = max(rounds[1:] or rounds)
        row.update({"rounds": len(rounds), "round_p50_ms": round(float(np.percentile(rounds, 50)), 1),
                    "round_max_ms": round(worst, 1), "held": worst < chunk})
    if cuda:
        row["mib_per_stream"] = round((torch.cuda.max_memory_allocated() - before) / n / 2**20, 1)
    return row


def sweep(model, audio: list[np.ndarray], counts: list[int], seconds: float, deadline: float,
          emit: Callable[[dict], None] = lambda row: None) -> list[dict]:
    """One row per count (each handed to ``emit`` when done). A count the memory formula rules
    out is skipped; an out-of-memory ends that count only (``oom``); a count not held ends the
    sweep (more streams will not hold either); the deadline skips the counts left."""
    from susurrus.api import HALF
    from susurrus.model.memory import stream_bytes

    cuda = model.device.startswith("cuda")
    rows: list[dict] = []
    stop = ""
    for n in counts:
        row: dict[str, Any]
        if stop or time.monotonic() > deadline:
            row = {"streams": n, "skipped": stop or "the deadline passed"}
        else:
            need = n * stream_bytes(model.net.dims, HALF.get(model.compute_type, torch.float32),
                                    frames=int(seconds * 50) + 160).total
            free = torch.cuda.mem_get_info()[0] if cuda else None
            if free is not None and need > 0.9 * free:
                row = {"streams": n, "skipped": f"memory: {need / 2**30:.1f} GiB > 90 % of {free / 2**30:.1f}"}
            else:
                try:
                    row = sweep_point(model, audio, n, seconds, deadline)
                except Exception as err:  # noqa: BLE001 - only an out-of-memory is this count's row
                    if not is_oom(err):
                        raise
                    row = {"streams": n, "oom": one_line(err, 160)}
                free_memory(cuda)
                if row.get("held") is False:
                    stop = f"{n} streams did not hold"
        rows.append(row)
        print(f"  {row}", file=sys.stderr, flush=True)
        emit(row)
    return rows


def sweep_part(ctx: Context, deadline: float) -> None:
    audio = [decode(i) for i in ctx.items()]
    counts = [1, 4] if ctx.quick else [1, 16, 64, 128, 256, 400]
    seconds = 2.0 if ctx.quick else 6.0
    def run(model, key: str, end: float, mib: dict) -> None:
        first = [mib]  # the model's memory on the first count's row
        sweep(model, audio, counts, seconds, end, lambda row: ctx.emit(key, {**first.pop(), **row} if first else row,
                                                                      many=True))

    each_shape(ctx, deadline, run, "streams together")


# ------------------------------------------------------------------------------- server

def client_audio(items: list[dict], n: int, seconds: float) -> list:
    """Per client, dev recordings back to back (half a second apart) until ``seconds``, client k
    starting at item k; items longer than ``seconds`` left out, so no client runs far longer."""
    import server_concurrency as sc

    from susurrus.audio.io import resample
    from susurrus.client import to_pcm16

    usable = [i for i in items if i["duration_s"] <= seconds] or items
    decoded: dict[str, np.ndarray] = {}
    gap = np.zeros(8000, np.float32)
    results = []
    for k in range(n):
        parts, texts, total, j = [], [], 0.0, k
        while total < seconds:
            item = usable[j % len(usable)]
            if item["id"] not in decoded:
                decoded[item["id"]] = decode(item)
            parts += [decoded[item["id"]], gap]
            texts.append(item["text"])
            total += (len(decoded[item["id"]]) + len(gap)) / 16000
            j += 1
        audio = np.concatenate(parts)
        results.append(sc.Result(f"client{k:02d}+{usable[k % len(usable)]['id']}", len(audio) / 16000,
                                 " ".join(texts), to_pcm16(resample(audio, 16000, sc.RATE))))
    return results


def server_part(ctx: Context, deadline: float) -> dict:
    """``susurrus serve`` on the device with N real-time tiny.en sessions; each client gives up
    at its own limit (a failed transcription or a timeout counts as failed); as many texts as the
    deadline allows compared with ``model.stream`` alone on the same samples."""
    import server_concurrency as sc

    import susurrus
    from susurrus.evaluation.metrics import corpus_error_rate

    clients, seconds = (2, 3.0) if ctx.quick else (64, 12.0)
    model_dir = ctx.model_dir()
    results = client_audio(ctx.items(every=True), clients, seconds)
    longest = max(r.duration for r in results)
    left = deadline - time.monotonic()
    if left < longest + 10:  # the clients' audio runs at real-time pace: it cannot be cut short
        row = {"skipped": f"{max(0.0, left):.0f} s left before the deadline, the clients need {longest:.0f} s + 10"}
        ctx.emit("server", row)
        return row
    args = argparse.Namespace(model=str(model_dir), threads=1, workers=1, compute_type="auto", device=ctx.device,
                              ws_compression=False, stagger_s=0.0)
    with tempfile.TemporaryFile("w+") as log:
        try:
            sc.serve_and_stream(args, results, True, client_limit_s=max(5.0, min(60.0, left - longest - 30)),
                                start_timeout_s=max(20.0, min(180.0, left - longest - 10)), log=log)
        except SystemExit as err:  # launch.wait_healthy: the server exited or never answered
            log.seek(0)
            said = " / ".join(log.read().strip().splitlines()[-3:])
            raise SystemExit(f"{err}{'; its output ends: ' + said if said else ' (it printed nothing)'}") from None
    done = [r for r in results if not r.failed]
    model = susurrus.load_model(str(model_dir), device=ctx.device)
    same = []
    for r in done:
        if time.monotonic() > deadline:
            break
        same.append(sc.stream_alone(model, r) == r.transcript)
    wall = [x for r in done for x in r.wall_latency]
    row: dict[str, Any] = {
        "clients": clients, "audio_s_each": f"{min(r.duration for r in results):.1f}-{longest:.1f}",
        "completed": f"{len(done)}/{clients}", "failed": clients - len(done),
        "wall_latency_mean_s": round(float(np.mean(wall)), 2) if wall else None,
        "wall_latency_p90_s": round(sc.pct(wall, 90), 2) if wall else None,
        "same_as_model_stream": f"{sum(same)}/{len(same)}" + ("" if len(same) == len(done) else " compared"),
        "wer_vs_ref": round(corpus_error_rate([(r.reference, r.transcript) for r in done]), 2) if done else None,
        "commit_lag_max_s": round(max(r.commit_lag for r in done), 2) if done else None,
        "errors": sum(len(r.errors) for r in results)}
    if clients - len(done):
        row["first_failure"] = next(r.failed for r in results if r.failed)[:200]
    ctx.emit("server", row)
    return row
