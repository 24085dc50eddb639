"""``compute_type="bf16_encoder"`` and ``"auto"``: the encoder's linear layers in bfloat16 where
the CPU multiplies it in hardware (streams stepped together stay exact: ``test_batched.py``)."""

from __future__ import annotations

import pytest
import torch

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import error_counts


@pytest.fixture(scope="module")
def bf16_tiny():
    import susurrus

    return susurrus.load_model("tiny.en", compute_type="bf16_encoder")


def test_auto_is_bf16_encoder_exactly_where_the_cpu_has_bf16_instructions(tiny):
    import susurrus
    from susurrus.api import resolve_compute_type
    from susurrus.cli import main as cli
    from susurrus.model.layers import native_bf16

    expected = "bf16_encoder" if native_bf16() else "float32"
    assert resolve_compute_type("auto") == expected
    assert tiny.compute_type == expected  # load_model's default is auto, and the model says what it became
    assert resolve_compute_type("float32") == "float32"
    with pytest.raises(ValueError, match="auto"):
        resolve_compute_type("bf16")
    args = cli.build_parser().parse_args(["stream", "x"])
    assert args.compute_type == "auto"
    assert susurrus.load_model("tiny.en", compute_type="float32").compute_type == "float32"


@pytest.mark.slow
def test_bf16_encoder_quantises_the_encoder_blocks_only_and_streams_as_float32(bf16_tiny, tiny_float32, dev_item):
    from susurrus.model.layers import Bf16Linear, Linear

    enc, dec = bf16_tiny.net.encoder, bf16_tiny.net.decoder
    assert all(type(m) is Bf16Linear for m in enc.blocks.modules() if isinstance(m, Linear))
    assert not any(isinstance(m, Bf16Linear) for m in dec.modules())
    assert enc.conv1.weight.dtype == torch.float32  # the stem stays float32
    # the encoder's attention runs in bfloat16 over keys/values kept in it; the decoder's in float32
    assert all(block.attn.dtype == torch.bfloat16 for block in enc.blocks)
    assert all(block.attn.dtype is None and block.cross_attn.dtype is None for block in dec.blocks)
    # jfk up to "... can do for you" (8 s of 11, 14 words): a CPU without bf16 instructions
    # emulates the encoder's products, and the rest of the speech repeats the same steps
    audio = decode_audio(dev_item("jfk_inaugural").audio)[: 8 * 16000]
    texts = []
    for model in (tiny_float32, bf16_tiny):
        stream = model.stream()
        list(stream.events(audio[i:i + 10240] for i in range(0, len(audio), 10240)))
        texts.append(stream.text)
        cache = stream.window.encoder.cache.layers[0]
        assert cache.k.dtype == (torch.bfloat16 if model is bf16_tiny else torch.float32)  # half the memory
    errors, _ = error_counts(texts[0], texts[1])
    assert errors <= 2, texts  # the same text on all 49 English dev items (docs/benchmarks.md)
    assert len(texts[1].split()) > 10


def test_bf16_linear_rounds_once_and_gives_the_bits_of_the_plain_formula(bf16_tiny):
    """The block rounds its input to bfloat16 once for the three projections and keeps the
    bias-free key in bfloat16: the same bits as rounding in each layer and converting back."""
    import torch.nn.functional as F

    block = bf16_tiny.net.encoder.blocks[0]
    attn = block.attn
    x = torch.randn(37, attn.query.in_features)
    for layer in (attn.query, attn.value, block.mlp[0]):
        plain = F.linear(x.to(torch.bfloat16), layer.weight).float() + layer.bias
        assert layer(x).dtype == torch.float32
        assert torch.equal(layer(x), plain)
        assert torch.equal(layer(attn.projected(x)), plain)  # input rounded beforehand: the same
    kv = attn.project_kv(attn.projected(x))
    assert kv.k.dtype == torch.bfloat16
    assert torch.equal(kv.k, F.linear(x.to(torch.bfloat16), attn.key.weight).float().to(torch.bfloat16))
    assert torch.equal(kv.v, attn.value(x).to(torch.bfloat16))
