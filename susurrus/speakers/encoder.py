"""The speaker encoder: Resemblyzer's pretrained GE2E network (Wan et al., "Generalized
end-to-end loss for speaker verification", ICASSP 2018), its weights read from the
``resemblyzer`` package (PyPI, ``pretrained.pt``, ~17 MB) without importing it (its own
preprocessing pulls librosa and webrtcvad; the network is small enough to run here).

The network: 40-channel mel power frames (25 ms Hann window, 10 ms hop at 16 kHz) through a
3-layer LSTM (40 → 256), the last layer's final hidden state through Linear(256 → 256) and a
ReLU, L2-normalised. One embedding reads a 1.6 s partial (160 frames). Equal to
``resemblyzer.VoiceEncoder`` on the same audio (tests/test_speakers.py)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from susurrus import disk_cache
from susurrus.audio.features import mel_filters

SAMPLE_RATE = 16000
WINDOW = 400  # 25 ms
HOP = 160  # 10 ms
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_SAMPLES = PARTIAL_FRAMES * HOP
EMBED_DIM = 256


class SpeakerEncoderMissing(RuntimeError):
    pass


def weights_path() -> Path:
    """``pretrained.pt`` of the installed ``resemblyzer`` package (found, not imported)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise SpeakerEncoderMissing("speaker labels need the speaker encoder's weights: pip install resemblyzer "
                                    "(or susurrus[speakers])")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise SpeakerEncoderMissing(f"resemblyzer is installed but {path} is missing")
    return path


class VoiceEncoder(nn.Module):
    """GE2E: ``forward(mels (batch, frames, 40)) -> (batch, 256)`` unit vectors (all >= 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(40, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, EMBED_DIM)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.linear(hidden[-1]))
        return raw / raw.norm(dim=1, keepdim=True).clamp_min(1e-12)


@functools.lru_cache(maxsize=1)
def load_encoder() -> VoiceEncoder:
    """The pretrained network, loaded once per process (shared by every stream: read-only)."""
    state = torch.load(weights_path(), map_location="cpu", weights_only=True)["model_state"]
    net = VoiceEncoder()
    net.load_state_dict({k: v for k, v in state.items() if not k.startswith("similarity_")})
    return net.eval()


@functools.lru_cache(maxsize=1)
def _mel_basis() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.hann_window(WINDOW, periodic=True), mel_filters(40)


def mel_frames(wav: np.ndarray) -> torch.Tensor:
    """Mel power (not log) frames ``(frames, 40)`` as librosa's ``melspectrogram`` computes them
    with Resemblyzer's settings: centred frames, zero padding, |STFT|^2, Slaney filters."""
    window, basis = _mel_basis()
    x = torch.from_numpy(np.asarray(wav, dtype=np.float32))
    spec = torch.stft(x, WINDOW, HOP, window=window, center=True, pad_mode="constant", return_complex=True)
    return (basis @ spec.abs().pow(2)).T.contiguous()


def partial_starts(n_samples: int, rate: float = 1.3, min_coverage: float = 0.75) -> list[int]:
    """First mel frame of each partial of an utterance, as Resemblyzer's ``compute_partial_slices``."""
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / rate) / HOP))
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    coverage = (n_samples - starts[-1] * HOP) / PARTIAL_SAMPLES
    if coverage < min_coverage and len(starts) > 1:
        starts.pop()
    return starts


@functools.lru_cache(maxsize=1)
def ort_encoder():
    """The same network as an ONNX Runtime session on one thread, or None without ``onnx`` and
    ``onnxruntime``. Exported from :func:`load_encoder` by torch (~2 CPU-s, once: the graph is
    kept in ``~/.cache/susurrus`` (:mod:`susurrus.disk_cache`), named by the weights' digest,
    and read from there after; where that cannot be written, it is exported again per process). Same embeddings (within
    1e-4 of torch's, tests/test_speakers.py); a batch of windows costs less a window than torch's
    LSTM (2 windows: 15 vs 24 ms a window, 4: 13 vs 19 ms, one core)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import hashlib
    import io
    import warnings

    digest = hashlib.sha1(weights_path().read_bytes()).hexdigest()[:16]
    root = disk_cache.root()
    cached = None if root is None else root / f"speaker_encoder_{digest}.onnx"
    try:
        graph = cached.read_bytes() if cached else None
    except OSError:
        graph = None
    if graph is None:
        try:
            import onnx  # noqa: F401  (torch's exporter needs it; imported only here: ~1-4 s)
        except ImportError:
            return None
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(load_encoder(), (torch.zeros(1, PARTIAL_FRAMES, 40),), buf, input_names=["mels"],
                              output_names=["embedding"], dynamic_axes={"mels": {0: "batch"}}, dynamo=False)
        graph = buf.getvalue()
        if cached:
            disk_cache.write_whole(cached, lambda tmp: tmp.write_bytes(graph))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])


@torch.inference_mode()
def embed_partials(wavs: list[np.ndarray], runtime: str = "auto") -> np.ndarray:
    """One embedding per 1.6 s piece of audio (shorter ones zero-padded), ``(n, 256)`` float32;
    ``runtime``: "ort" (:func:`ort_encoder`), "torch", or "auto" (ort where installed)."""
    if not wavs:
        return np.zeros((0, EMBED_DIM), np.float32)
    mels = torch.stack([mel_frames(np.pad(w, (0, max(0, PARTIAL_SAMPLES - len(w)))))[:PARTIAL_FRAMES]
                        for w in wavs])
    sess = ort_encoder() if runtime != "torch" else None
    if sess is None and runtime == "ort":
        raise SpeakerEncoderMissing("the ONNX Runtime speaker encoder needs onnx and onnxruntime: pip install onnx")
    if sess is not None:
        return sess.run(None, {"mels": mels.numpy()})[0]
    return load_encoder()(mels).numpy()


@torch.inference_mode()
def embed_utterance(wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's ``embed_utterance`` (rate 1.3, coverage 0.75): the normalised mean of the
    partials' embeddings. ``wav`` as Resemblyzer gets it after its own preprocessing."""
    starts = partial_starts(len(wav))
    end = (starts[-1] + PARTIAL_FRAMES) * HOP
    wav = np.pad(np.asarray(wav, np.float32), (0, max(0, end - len(wav))))
    mel = mel_frames(wav)
    partials = load_encoder()(torch.stack([mel[s:s + PARTIAL_FRAMES] for s in starts])).numpy()
    mean = partials.mean(0)
    return mean / np.linalg.norm(mean)
