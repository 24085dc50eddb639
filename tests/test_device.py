"""The device and the GPU's compute types (issue 51): device resolution, ``--device`` through
the command line and ``load_model``, the half dtypes running on the CPU, the memory formula
against a real stream's tensors, and the tests marked ``cuda`` (skipped where torch sees no
GPU: benchmarks/gpu_check.py runs them on one)."""

from __future__ import annotations

import os

import pytest
import torch

from susurrus.api import CPU_ONLY, load_model, resolve_compute_type, resolve_device
from susurrus.cli.main import main
from susurrus.evaluation.metrics import normalize
from susurrus.model.layers import native_bf16
from susurrus.model.memory import fitting_streams, held_bytes, model_bytes, stream_bytes

CUDA = torch.cuda.is_available()
cuda = pytest.mark.cuda
needs_cuda = pytest.mark.skipif(not CUDA, reason=f"no CUDA GPU: torch {torch.__version__} sees none "
                                                 "(benchmarks/gpu_check.py runs these on a GPU)")
JFK_WORDS = "ask not what your country can do for you"
# the weights the cuda tests load (benchmarks/gpu_check.py points this at its prepared copy)
TINY = os.environ.get("SUSURRUS_TEST_TINY", "tiny.en")


@pytest.fixture(scope="module")
def jfk(dev_item):
    from susurrus.audio.io import decode_audio

    return decode_audio(dev_item("jfk_inaugural").audio)


def streamed(model, audio, n: int = 1) -> list[str]:
    if n == 1:
        s = model.stream()
        for i in range(0, len(audio), 3200):
            s.feed(audio[i:i + 3200])
        s.finish()
        return [s.text]
    batch = model.streams()
    streams = [batch.stream() for _ in range(n)]
    for i in range(0, len(audio), 3200):
        batch.feed({s: audio[i:i + 3200] for s in streams})
    batch.finish(streams)
    return [s.text for s in streams]


def offline(model, audio, **options) -> str:
    segments, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, **options)
    return " ".join(s.text.strip() for s in segments)


def test_device_resolution():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if CUDA else "cpu")
    for bad in ("tpu", "gpu", "cuda:x"):
        with pytest.raises(ValueError, match="device must be"):
            resolve_device(bad)
    if not CUDA:
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda:0")


def test_compute_types_per_device():
    # the CPU's auto is unchanged; the CPU-only types are refused on a GPU (before any GPU is needed)
    assert resolve_compute_type("auto", "cpu") == ("bf16_encoder" if native_bf16() else "float32")
    assert resolve_compute_type("bfloat16", "cpu") == "bfloat16"
    for name in CPU_ONLY:
        with pytest.raises(ValueError, match="runs on a CPU only"):
            resolve_compute_type(name, "cuda")
    assert resolve_compute_type("float16", "cuda") == "float16"


@pytest.mark.slow
def test_cli_device(tmp_path, dev_item, capsys):
    path = str(dev_item("jfk_inaugural").audio)
    if not CUDA:
        assert main(["transcribe", "--device", "cuda", path]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["transcribe", "--device", "tpu", path])
    capsys.readouterr()
    assert main(["transcribe", "--device", "cpu", "--quiet", "--output-format", "txt", "--output-dir",
                 str(tmp_path), path]) == 0
    assert JFK_WORDS in normalize((tmp_path / "jfk_inaugural.txt").read_text())


def test_default_workers_on_a_gpu():
    from susurrus.server.app import default_workers

    assert default_workers("cuda:0") == 1
    assert default_workers("cpu") >= 1


def test_ray_gpus_per_replica():
    from susurrus.cli.main import build_parser

    args = build_parser().parse_args(["serve-ray", "--gpus-per-replica", "1", "--device", "cuda"])
    assert (args.gpus_per_replica, args.device) == (1.0, "cuda")
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
    from susurrus.server.ray_serve import ReplicaOptions, ScaleOptions, deployment_options

    options = deployment_options(ReplicaOptions(device="cuda"), ScaleOptions(num_gpus=1.0))
    assert options["ray_actor_options"]["num_gpus"] == 1.0
    assert "num_gpus" not in deployment_options(ReplicaOptions(), ScaleOptions())["ray_actor_options"]


@pytest.mark.slow
@pytest.mark.parametrize("compute_type", ["bfloat16", "float16"])
def test_half_dtypes_on_cpu(compute_type, jfk):
    """The GPU's dtypes run their code paths on the CPU (slowly): the whole model in the dtype,
    sane text offline, streaming alone and two streams stepped together. The CPU emulates both
    dtypes (~50x float32's time), so each path runs on the shortest audio that shows it: offline
    greedy (the fallback's temperatures would only repeat the dtype's code) on jfk up to "...
    can do for you" (8 s: the offline pass encodes a whole padded window whatever the length,
    and on "And so, my fellow Americans" alone bfloat16 reads "am I fellow"), the streams, alone
    and the pair, on "And so, my fellow Americans" (3.2 s; a stream encodes only what it is fed)."""
    model = load_model("tiny.en", device="cpu", compute_type=compute_type)
    assert model.net.dtype == getattr(torch, compute_type) and model.device == "cpu"
    text = offline(model, jfk[:16000 * 8], temperature=0.0)
    assert "what your country can do" in normalize(text), text
    clip = jfk[:int(16000 * 3.2)]
    for text in [*streamed(model, clip, 1), *streamed(model, clip, 2)]:  # alone, then stepped together
        assert "my fellow americans" in normalize(text), text


def test_model_bytes_are_the_tensors(tiny_float32):
    net = tiny_float32.net
    held = sum(p.numel() * p.element_size() for p in net.parameters())
    held += sum(b.numel() * b.element_size() for b in net.buffers())  # positions, the transposed output
    held += sum(kv.k.numel() * 4 * 2 for kv in tiny_float32.stream().state.cross.pad)  # the shared silence
    assert model_bytes(net.dims, torch.float32) == held


def test_a_half_model_projects_its_logits_in_float32(tiny_float32):
    """A bfloat16 model (the GPU's default) keeps the output matrix in float32, the checkpoint's
    own weights, and its last norm's output in float32: its logits are a float32 product, not a
    bfloat16 one cast to float32. Its bytes are the formula's (the float32 output copy in it)."""
    half = load_model("tiny.en", device="cpu", compute_type="bfloat16")
    dec, ref = half.net.decoder, tiny_float32.net.decoder
    assert dec.token_embedding.weight.dtype == torch.bfloat16
    assert dec.output_t.dtype == torch.float32 and torch.equal(dec.output_t, ref.output_t)
    hidden = dec.ln(torch.randn(3, 384).to(torch.bfloat16))
    assert hidden.dtype == torch.float32
    assert torch.equal(dec.project(hidden), hidden @ ref.output_t)
    dims = half.net.dims
    held = sum(t.numel() * t.element_size() for t in [*half.net.parameters(), *half.net.buffers()])
    silence = dims.n_text_layer * 2 * dims.n_audio_ctx * dims.n_text_state * 2  # (not made here: a slow encode)
    assert model_bytes(dims, torch.bfloat16) == held + silence


def test_stream_bytes_bound_a_real_stream(tiny_float32, jfk):
    """The formula against the tensors of a real tiny.en stream: the cross-attention buffer
    exactly, the encoder's keys/values at least those of its frames and within the formula's
    peak, the whole at most the formula's peak (the 30 s window)."""
    dims = tiny_float32.net.dims
    s = tiny_float32.stream()
    for i in range(0, len(jfk), 3200):
        s.feed(jfk[i:i + 3200])
    enc = s.state.window.encoder
    frames = enc.cache.length
    assert frames > 300  # (11 s of speech: ~550 frames, some provisional)
    peak = stream_bytes(dims, torch.float32)
    cross = sum(kv.k.untyped_storage().nbytes() + kv.v.untyped_storage().nbytes() for kv in s.state.cross.own)
    assert cross == peak.cross_kv
    encoder = sum(kv.k.untyped_storage().nbytes() + kv.v.untyped_storage().nbytes() for kv in enc.cache.layers)
    assert 2 * dims.n_audio_layer * frames * dims.n_audio_state * 4 <= encoder <= peak.encoder_kv
    assert held_bytes(s) <= peak.total - peak.transient
    # large-v3-turbo's encoder keys/values over a window in bf16: ~245 MB, the issue's figure (+ the stores' room)
    turbo = type(dims)(128, 1500, 1280, 20, 32, 51866, 448, 1280, 20, 4)
    assert stream_bytes(turbo, torch.bfloat16).encoder_kv == 32 * 2 * 1875 * 1280 * 2
    assert fitting_streams(turbo, torch.bfloat16, 80 * 2**30) >= 150


# ------------------------------------------------------------------------- on a CUDA GPU

@cuda
@needs_cuda
def test_cuda_float32_matches_cpu(jfk):
    tiny_float32 = load_model(TINY, device="cpu", compute_type="float32")
    gpu = load_model(TINY, device="cuda", compute_type="float32")
    assert gpu.device.startswith("cuda") and gpu.net.dtype == torch.float32
    assert normalize(offline(gpu, jfk)) == normalize(offline(tiny_float32, jfk))
    assert normalize(streamed(gpu, jfk)[0]) == normalize(streamed(tiny_float32, jfk)[0])


@cuda
@needs_cuda
@pytest.mark.parametrize("compute_type", ["auto", "bfloat16", "float16"])
def test_cuda_half(compute_type, jfk):
    gpu = load_model(TINY, device="cuda", compute_type=compute_type)
    assert gpu.compute_type in ("bfloat16", "float16")
    for text in [offline(gpu, jfk), *streamed(gpu, jfk, 1), *streamed(gpu, jfk, 3)]:
        assert JFK_WORDS in normalize(text), text


@cuda
@needs_cuda
def test_cuda_caches_live_on_the_card(jfk):
    gpu = load_model(TINY, device="cuda")
    s = gpu.stream()
    s.feed(jfk[:16000 * 4])
    assert all(kv.k.is_cuda for kv in s.state.cross.own)
    assert all(kv.k.is_cuda for kv in s.state.window.encoder.cache.layers if kv is not None)
    assert not s.state.window.mel.is_cuda  # the front end stays on the host
