"""The silence encoding kept on disk between processes (``streaming/silence_cache.py``): read back
bit for bit what the pass makes, and never read for other weights, code or threads."""

from __future__ import annotations

import torch

from susurrus.streaming import silence_cache
from susurrus.streaming.config import SILENCE_LEVEL
from susurrus.streaming.encoder import silence_encoding


def _fresh(net):
    """The pass as a new process makes it: nothing kept on the encoder."""
    if hasattr(net.encoder, "silence_encoding"):
        del net.encoder.silence_encoding
    return silence_encoding(net)


def _same(a, b) -> bool:
    return torch.equal(a[1], b[1]) and all(torch.equal(x.k, y.k) and torch.equal(x.v, y.v)
                                           for x, y in zip(a[0], b[0], strict=True))


def test_a_kept_silence_encoding_is_read_back_bit_for_bit(tiny_float32, tmp_path, monkeypatch):
    net = tiny_float32.net
    monkeypatch.setenv("SUSURRUS_CACHE_DIR", "off")
    computed = _fresh(net)
    monkeypatch.setenv("SUSURRUS_CACHE_DIR", str(tmp_path))
    written = _fresh(net)  # computed again, and kept
    (kept,) = (tmp_path / "silence").glob("*.pt")
    read = _fresh(net)
    assert _same(computed, written) and _same(computed, read)
    assert read[1].data_ptr() != written[1].data_ptr()  # read from the file, not the same tensors
    # a file cut short (a process that died writing) is not read: the pass is made again
    kept.write_bytes(kept.read_bytes()[:1000])
    assert _same(computed, _fresh(net))


def test_the_digest_follows_the_weights_the_threads_and_the_level(tiny_float32):
    enc = tiny_float32.net.encoder
    key = silence_cache.digest(enc, SILENCE_LEVEL)
    assert silence_cache.digest(enc, SILENCE_LEVEL) == key
    assert silence_cache.digest(enc, SILENCE_LEVEL - 0.5) != key
    weight = enc.blocks[-1].mlp[2].weight
    with torch.no_grad():
        old = weight[0, 0].item()
        weight[0, 0] = old + 1e-6
        try:
            assert silence_cache.digest(enc, SILENCE_LEVEL) != key
        finally:
            weight[0, 0] = old
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert silence_cache.digest(enc, SILENCE_LEVEL) != key
    finally:
        torch.set_num_threads(threads)
    assert silence_cache.digest(enc, SILENCE_LEVEL) == key


def test_an_int8_encoder_has_its_own_digest(tiny_float32):
    """int8 weights live in packed parameters: they are part of the digest too."""
    import susurrus

    int8 = susurrus.load_model("tiny.en", compute_type="int8_encoder").net.encoder
    assert silence_cache.digest(int8, SILENCE_LEVEL) != silence_cache.digest(tiny_float32.net.encoder, SILENCE_LEVEL)
