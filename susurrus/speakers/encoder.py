"""The speaker encoders. GE2E: Resemblyzer's pretrained network (Wan et al., "Generalized
end-to-end loss for speaker verification", ICASSP 2018), its weights read from the
``resemblyzer`` package (PyPI, ``pretrained.pt``, ~17 MB) without importing it (its own
preprocessing pulls librosa and webrtcvad; the network is small enough to run here).

The network: 40-channel mel power frames (25 ms Hann window, 10 ms hop at 16 kHz) through a
3-layer LSTM (40 → 256), the last layer's final hidden state through Linear(256 → 256) and a
ReLU, L2-normalised. One embedding reads a 1.6 s partial (160 frames). Equal to
``resemblyzer.VoiceEncoder`` on the same audio (tests/test_speakers.py).

The other, and the default (``encoder="campplus"``, :mod:`~susurrus.speakers.campplus`): CAM++,
far better separated voices (equal-error rate on the shared data's 1.6 s partials 1.8 % against
GE2E's 7.9 %) at 2-4x the CPU a window (one core, ONNX Runtime: 15 ms against 4-7 on a Xeon,
~50 against 12-14 on an EPYC), so a stream embeds one window a second with it instead of two
(tracker.py)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from susurrus.audio.features import mel_filters
from susurrus.speakers.runtime import SpeakerEncoderMissing, ort_session, run_network
from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_NAMES, ENCODER_SPECS

SAMPLE_RATE = 16000
WINDOW = 400  # 25 ms
HOP = 160  # 10 ms
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_SAMPLES = PARTIAL_FRAMES * HOP
EMBED_DIM = ENCODER_SPECS["ge2e"].dim


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
    with torch.inference_mode(False):  # plain parameters, whatever mode the first caller is in
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
    """The same network as an ONNX Runtime session on one thread (:func:`ort_session`), or None.
    Same embeddings (within 1e-4 of torch's, tests/test_speakers.py); a batch of windows costs
    less a window than torch's LSTM (2 windows: 15 vs 24 ms a window, 4: 13 vs 19 ms, one core)."""
    return ort_session(load_encoder(), torch.zeros(1, PARTIAL_FRAMES, 40), weights_path(), "speaker_encoder",
                       "mels")


@torch.inference_mode()
def embed_partials(wavs: list[np.ndarray], runtime: str = "auto", encoder: str = DEFAULT_ENCODER) -> np.ndarray:
    """One embedding per 1.6 s piece of audio (shorter ones zero-padded), ``(n, 256)`` float32;
    ``runtime``: "ort" (:func:`ort_encoder`), "torch", or "auto" (ort where installed; for
    CAM++ also "openvino", which "auto" takes first where installed);
    ``encoder``: one of ``settings.ENCODER_NAMES`` ("campplus": ``(n, 192)``, :mod:`.campplus`)."""
    if encoder == "campplus":
        from susurrus.speakers import campplus

        return campplus.embed_partials(wavs, PARTIAL_SAMPLES, runtime)
    if encoder != "ge2e":
        raise ValueError(f"unknown speaker encoder {encoder!r}: one of {', '.join(ENCODER_NAMES)}")
    if not wavs:
        return np.zeros((0, EMBED_DIM), np.float32)
    mels = torch.stack([mel_frames(np.pad(w, (0, max(0, PARTIAL_SAMPLES - len(w)))))[:PARTIAL_FRAMES]
                        for w in wavs])
    return run_network(mels, runtime, ort_encoder, load_encoder, "mels")


def load(encoder: str = DEFAULT_ENCODER) -> None:
    """Load ``encoder`` now (once a process: the network and its ONNX Runtime session), not at a
    stream's first voiced window."""
    if encoder == "campplus":
        from susurrus.speakers import campplus

        campplus.load_campplus()
        if campplus.openvino_campplus() is None:
            campplus.ort_campplus()
    elif encoder == "ge2e":
        load_encoder()
        ort_encoder()
    else:
        raise ValueError(f"unknown speaker encoder {encoder!r}: one of {', '.join(ENCODER_NAMES)}")


@torch.inference_mode()
def embed_utterance(wav: np.ndarray, encoder: str = DEFAULT_ENCODER) -> np.ndarray:
    """Resemblyzer's ``embed_utterance`` (rate 1.3, coverage 0.75): the normalised mean of the
    partials' embeddings. ``wav`` as Resemblyzer gets it after its own preprocessing. Another
    ``encoder``: the same partials, through it."""
    starts = partial_starts(len(wav))
    end = (starts[-1] + PARTIAL_FRAMES) * HOP
    n = len(wav)
    wav = np.pad(np.asarray(wav, np.float32), (0, max(0, end - len(wav))))
    if encoder != "ge2e":  # whole partials only (CAM++'s features are normalised over the piece)
        starts = [s for s in starts if s * HOP + PARTIAL_SAMPLES <= n] or starts[:1]
        partials = embed_partials([wav[s * HOP: s * HOP + PARTIAL_SAMPLES] for s in starts], encoder=encoder)
        mean = partials.mean(0)
        return mean / np.linalg.norm(mean)
    mel = mel_frames(wav)
    partials = load_encoder()(torch.stack([mel[s:s + PARTIAL_FRAMES] for s in starts])).numpy()
    mean = partials.mean(0)
    return mean / np.linalg.norm(mean)
