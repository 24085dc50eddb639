"""A stream's cross-attention buffer: its own frames in front, the silence every stream shares
behind them, read as one without a copy (``CrossBuffer``, ``PartedKV``), kept head by head
(``HeadKV``)."""

from __future__ import annotations

import torch

from susurrus.model.caches import KV, HeadKV, heads_of
from susurrus.model.whisper import MultiHeadAttention
from susurrus.streaming.state import CrossBuffer

WIDTH, HEADS, POSITIONS = 64, 4, 1500


def _silence(layers: int = 2) -> list[HeadKV]:
    g = torch.Generator().manual_seed(0)
    return [HeadKV.of(KV(torch.randn(1, POSITIONS, WIDTH, generator=g), torch.randn(1, POSITIONS, WIDTH, generator=g)),
                      HEADS) for _ in range(layers)]


def _frames(n: int, seed: int, layers: int = 2) -> list[KV]:
    g = torch.Generator().manual_seed(seed)
    return [KV(torch.randn(1, n, WIDTH, generator=g), torch.randn(1, n, WIDTH, generator=g)) for _ in range(layers)]


def _whole(buffer: CrossBuffer, layer: int) -> KV:
    """What the buffer's layer holds, as one copied KV (batch, time, width): its own frames,
    then the silence."""
    n = buffer.real
    own, pad = buffer.own[layer], buffer.pad[layer]
    k, v = torch.cat([own.k[:, :, :n], pad.k[:, :, n:]], 2), torch.cat([own.v[:, :, :n], pad.v[:, :, n:]], 2)
    return KV(k.transpose(1, 2).reshape(1, POSITIONS, WIDTH), v.transpose(1, 2).reshape(1, POSITIONS, WIDTH))


def _whole_silence(silence: list[HeadKV], layer: int) -> KV:
    pad = silence[layer]
    return KV(pad.k.transpose(1, 2).reshape(1, POSITIONS, WIDTH), pad.v.transpose(1, 2).reshape(1, POSITIONS, WIDTH))


@torch.inference_mode()
def test_attention_over_the_parts_is_attention_over_the_whole():
    torch.manual_seed(1)
    attn = MultiHeadAttention(WIDTH, HEADS)
    buffer = CrossBuffer(_silence())
    for real in (0, 1, 333, POSITIONS):
        buffer.restore(0)
        if real:
            buffer.write(0, _frames(real, seed=real))
        q = torch.randn(1, 3, WIDTH)
        for layer in range(2):
            whole = _whole(buffer, layer)
            out, scores = attn.mix(q, buffer.kv[layer], need_weights=True)
            ref, ref_scores = attn.mix(q, whole, need_weights=True)
            assert scores is not None and ref_scores is not None
            assert scores.shape == (1, HEADS, 3, POSITIONS)
            # the same up to float rounding (a matrix product's blocking differs with its width)
            torch.testing.assert_close(scores, ref_scores, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
            plain, none = attn.mix(q, buffer.kv[layer])
            assert none is None
            torch.testing.assert_close(plain, ref, rtol=1e-5, atol=1e-6)


@torch.inference_mode()
def test_the_silence_is_shared_not_copied_and_reads_back_where_frames_no_longer_reach():
    silence = _silence()
    a, b = CrossBuffer(silence), CrossBuffer(silence)
    a.write(0, _frames(100, seed=2))
    b.write(0, _frames(40, seed=3))
    for buffer, n in ((a, 100), (b, 40)):
        own, tail = buffer.kv[0].parts()
        assert own.length == n and tail.length == POSITIONS - n
        assert tail.k.untyped_storage().data_ptr() == silence[0].k.untyped_storage().data_ptr()
        assert own.k.untyped_storage().data_ptr() != silence[0].k.untyped_storage().data_ptr()
    # a shorter write: the positions it no longer reaches read silence again
    a.write(10, _frames(30, seed=4))
    assert a.real == 40
    assert torch.equal(_whole(a, 1).k[:, 40:], _whole_silence(silence, 1).k[:, 40:])
    # a write past the real frames: the silence between stays silence
    before = _whole(b, 0)
    b.write(60, _frames(5, seed=5))
    after = _whole(b, 0)
    assert b.real == 65
    assert torch.equal(after.k[:, :60], before.k[:, :60])
    assert torch.equal(after.v[:, 40:60], _whole_silence(silence, 0).v[:, 40:60])


@torch.inference_mode()
def test_save_and_load_put_back_frames_and_silence():
    buffer = CrossBuffer(_silence())
    buffer.write(0, _frames(50, seed=6))
    before = [_whole(buffer, i) for i in range(2)]
    saved = buffer.save(20, 80)
    buffer.write(20, _frames(70, seed=7))  # a trial decode's frames, past the saved real end
    assert buffer.real == 90
    buffer.load(saved)
    assert buffer.real == 50
    for i in range(2):
        assert torch.equal(_whole(buffer, i).k, before[i].k) and torch.equal(_whole(buffer, i).v, before[i].v)


@torch.inference_mode()
def test_keys_kept_head_by_head_give_the_same_bits_as_read_from_the_projection_s_layout():
    """The buffer keeps its keys/values head by head (a query reads a head's keys as one
    contiguous block); the products are the same: the same scores and output, bit for bit, as the
    same parts read through strided views of the (batch, time, width) projections."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(WIDTH, HEADS)
    frames = _frames(333, seed=8, layers=1)[0]
    pad = _whole_silence(_silence(1), 0)
    buffer = CrossBuffer(_silence(1))
    buffer.write(0, [frames])
    strided = [HeadKV(heads_of(frames.k, HEADS), heads_of(frames.v, HEADS)),
               HeadKV(heads_of(pad.k, HEADS)[:, :, 333:], heads_of(pad.v, HEADS)[:, :, 333:])]
    assert not strided[0].k.is_contiguous()
    for t in (1, 3):
        q = torch.randn(1, t, WIDTH)
        out, scores = attn.mix(q, buffer.kv[0], need_weights=True)
        ref, ref_scores = attn._mix_parts(q, strided, None, need_weights=True)
        assert torch.equal(out, ref) and scores is not None and torch.equal(scores, ref_scores)
