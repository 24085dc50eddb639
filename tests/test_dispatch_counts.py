"""What a GPU would launch and wait for, counted on the CPU (``susurrus.evaluation.dispatch``),
and the random-weight shapes the GPU benchmarks run (``load_model("random:SHAPE")``)."""

from __future__ import annotations

import pytest
import torch

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.dispatch import counting
from susurrus.model.loading import ModelNotFoundError
from susurrus.streaming import calls


def _step_counts(model, n: int):
    audio = decode_audio(susurrus.example_audio())
    batch = model.streams()
    streams = [batch.stream() for _ in range(n)]
    batch.feed({s: audio[:4 * 16000] for s in streams})
    with counting() as c:
        batch.feed({s: audio[4 * 16000:4 * 16000 + 10240] for s in streams})
    return c


def test_a_step_is_counted_by_part_and_everything_patched_is_put_back(tiny):
    tolist, run_kind, host_reads = torch.Tensor.tolist, calls._run_kind, calls._host_reads
    one = _step_counts(tiny, 1)
    assert (torch.Tensor.tolist, calls._run_kind, calls._host_reads) == (tolist, run_kind, host_reads)
    assert one.total == sum(one.ops.values()) > 0
    assert {"stream", "EncodeFrames", "DecodeTokens"} <= set(one.ops)
    assert one.calls["DecodeTokens"] >= 1 and one.calls["EncodeFrames"] >= 1
    # each decoder pass copies its logits, and its alignment scores (tiny.en's heads: every pass has some)
    assert one.transfers == {"DecodeTokens": 2 * one.calls["DecodeTokens"]}
    assert one.host_reads > 0 and not any(part != "stream" for part in one.reads)  # no wait inside a pass
    assert sum(n for (part, _), n in one.by_op.items() if part == "DecodeTokens") == one.ops["DecodeTokens"]


def test_packed_passes_share_their_launches(tiny):
    """Two streams in one round launch fewer ops than two rounds of one (the linear layers, norms
    and MLPs run once for both), and copy no more to the host: one copy per pass, not per row."""
    one, two = _step_counts(tiny, 1), _step_counts(tiny, 2)
    assert two.calls == one.calls
    assert two.ops["DecodeTokens"] < 2 * one.ops["DecodeTokens"]
    assert two.ops["EncodeFrames"] < 2 * one.ops["EncodeFrames"]
    assert sum(two.transfers.values()) == sum(one.transfers.values())


def test_random_weights_of_a_released_shape():
    a = susurrus.load_model("random:tiny.en")
    b = susurrus.load_model("random:tiny.en")
    assert a.net.dims == b.net.dims and a.net.dims.n_vocab == 51864 and not a.is_multilingual
    assert all(torch.equal(x, y) for x, y in zip(a.net.state_dict().values(), b.net.state_dict().values()))
    assert a.loaded.heads_origin == "OpenAI tiny.en (same shape)"
    with pytest.raises(ModelNotFoundError, match="random:large-v3-turbo"):
        susurrus.load_model("random:large-v9")
