"""``compute_type="bf16_encoder"`` and ``"auto"``: the encoder's linear layers in bfloat16 where
the CPU multiplies it in hardware; streams stepped together stay exact."""

from __future__ import annotations

import pytest
import torch

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import error_counts

SR = 16000


@pytest.fixture(scope="module")
def bf16_tiny():
    import susurrus

    return susurrus.load_model("tiny.en", compute_type="bf16_encoder")


def test_auto_is_bf16_encoder_exactly_where_the_cpu_has_bf16_instructions(tiny):
    import susurrus
    from susurrus.api import resolve_compute_type
    from susurrus.model.whisper import native_bf16
    from susurrus.transports import cli

    expected = "bf16_encoder" if native_bf16() else "float32"
    assert resolve_compute_type("auto") == expected
    assert tiny.compute_type == expected  # load_model's default is auto, and the model says what it became
    assert resolve_compute_type("float32") == "float32"
    with pytest.raises(ValueError, match="auto"):
        resolve_compute_type("bf16")
    args = cli.build_parser().parse_args(["stream", "x"])
    assert args.compute_type == "auto"
    assert susurrus.load_model("tiny.en", compute_type="float32").compute_type == "float32"


def test_bf16_encoder_quantises_the_encoder_blocks_only_and_streams_as_float32(bf16_tiny, tiny_float32, dev_item):
    from susurrus.model.whisper import Bf16Linear, Linear

    enc, dec = bf16_tiny.net.encoder, bf16_tiny.net.decoder
    assert all(type(m) is Bf16Linear for m in enc.blocks.modules() if isinstance(m, Linear))
    assert not any(isinstance(m, Bf16Linear) for m in dec.modules())
    assert enc.conv1.weight.dtype == torch.float32  # the stem stays float32
    # the encoder's attention runs in bfloat16 over keys/values kept in it; the decoder's in float32
    assert all(block.attn.dtype == torch.bfloat16 for block in enc.blocks)
    assert all(block.attn.dtype is None and block.cross_attn.dtype is None for block in dec.blocks)
    audio = decode_audio(dev_item("jfk_inaugural").audio)
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


def test_bf16_encoder_calls_run_row_by_row_so_batching_stays_exact(bf16_tiny, tiny, dev_item):
    """bfloat16 products of packed rows round differently from a row's own, so the encoder's
    calls of a round run one by one (``calls.row_by_row``): streams stepped together commit
    exactly the words and times each commits alone."""
    from susurrus.streaming.calls import DecodeTokens, EncodeFrames, row_by_row

    assert row_by_row(bf16_tiny.net) == (EncodeFrames,)  # the decoder's float32 rows stay packed
    assert DecodeTokens not in row_by_row(tiny.net)
    audios = [decode_audio(dev_item(i).audio)[: 8 * SR] for i in ("jfk_inaugural", "ljspeech_LJ001-0001")]
    batch = bf16_tiny.streams()
    streams = [batch.stream() for _ in audios]
    for i in range(0, 8 * SR, 1600):
        batch.feed({s: a[i:i + 1600] for s, a in zip(streams, audios)})
    batch.finish(streams)
    for stream, audio in zip(streams, audios):
        alone = bf16_tiny.stream()
        for i in range(0, len(audio), 1600):
            alone.feed(audio[i:i + 1600])
        alone.finish()
        assert [w.word for w in stream.words] == [w.word for w in alone.words]
        assert max(abs(w.start - a.start) for w, a in zip(stream.words, alone.words)) <= 0.021
    assert batch.calls_per_round > 1.5
