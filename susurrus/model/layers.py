"""The linear layers the network is built of, float32 (:class:`Linear`), bfloat16
(:class:`Bf16Linear`) and int8 (:func:`int8_linear`), and its convolution, as
:mod:`susurrus.model.whisper` uses them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Linear(nn.Linear):
    def forward(self, x: Tensor) -> Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.weight.to(x.dtype), bias)


class Conv1d(nn.Conv1d):
    def _conv_forward(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return super()._conv_forward(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))


def int8_linear(weight: Tensor, bias: Tensor | None = None) -> nn.Module:
    """A dynamically quantised linear layer (fbgemm int8 weights with per-row scales; each call
    quantises its input per tensor, 7-bit as fbgemm needs on CPUs without VNNI) with ``weight``
    (out, in) and an optional float ``bias``. Takes and returns float32."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.ao.nn.quantized.dynamic as qd
        from torch.ao.quantization import per_channel_dynamic_qconfig

        float_linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        float_linear.weight.data = weight.detach().float().clone()
        if bias is not None:
            float_linear.bias.data = bias.detach().float().clone()
        float_linear.qconfig = per_channel_dynamic_qconfig
        return qd.Linear.from_float(float_linear)


class Bf16Linear(Linear):
    """A linear layer computed in bfloat16: weights stored in bfloat16, the input rounded to it,
    products accumulated in float32 by the CPU's bf16 dot-product instructions (AVX512-BF16,
    AMX: ~2.5x the float32 rate on the encoder's matrix products here), the output rounded to
    bfloat16 and returned as float32 with the float32 bias added. Lossy: bfloat16 keeps 8 bits of
    mantissa. On a CPU without bf16 instructions it is emulated, and slower than float32."""

    @classmethod
    def of(cls, layer: Linear) -> Bf16Linear:
        out = cls(layer.in_features, layer.out_features, bias=layer.bias is not None)
        out.weight = nn.Parameter(layer.weight.detach().to(torch.bfloat16), requires_grad=False)
        if layer.bias is not None:
            out.bias = nn.Parameter(layer.bias.detach().float(), requires_grad=False)
        return out

    def product(self, x: Tensor) -> Tensor:
        """The product without the bias, in bfloat16."""
        return F.linear(x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16), self.weight)

    def forward(self, x: Tensor) -> Tensor:
        y = self.product(x)
        if self.bias is None:
            return y.float()
        return y.float().add_(self.bias)  # y exactly in float32 plus the bias: torch.add's values, faster


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX); elsewhere
    :class:`Bf16Linear` is emulated, and slower than float32."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)
