"""The incremental front end and encoder equal their offline counterparts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from susurrus.audio.features import log_mel_spectrogram, mel_power
from susurrus.audio.io import decode_audio
from susurrus.streaming.encoder import EncoderState, encode_step, normalize_frames, stem_frames
from susurrus.streaming.frontend import MelState, push_audio


@pytest.fixture(scope="module")
def audio(dev_item):
    return decode_audio(dev_item("ljspeech_LJ001-0001").audio)


def _stream_mel(audio: np.ndarray, sizes: list[int]) -> tuple[list[torch.Tensor], MelState]:
    state, out, i, k = MelState(), [], 0, 0
    while i < len(audio):
        n = sizes[k % len(sizes)]
        out.append(push_audio(state, audio[i:i + n]))
        i, k = i + n, k + 1
    out.append(push_audio(state, np.zeros(0, np.float32), final=True))
    return out, state


@pytest.mark.parametrize("sizes", [[1], [160], [5120], [37, 4001, 999, 16000]])
def test_incremental_mel_equals_offline(audio, sizes):
    clip = audio[: 16000 * 2] if sizes == [1] else audio
    pieces, state = _stream_mel(clip, sizes)
    ref = mel_power(clip)[:, : len(clip) // 160]
    streamed = torch.cat(pieces, dim=1)
    assert streamed.shape == ref.shape
    assert (streamed - ref).abs().max() < 1e-4
    assert len(state.tail) < 2000  # only a few hundred samples of context are kept


def test_incremental_mel_is_the_same_bit_for_bit_whatever_the_pieces(audio):
    # a frame must not depend on how many frames one call computed (a BLAS product's rounding
    # does): streams fed in other pieces would otherwise drift apart over minutes
    ref = torch.cat(_stream_mel(audio, [160])[0], dim=1)
    for sizes in ([1600], [10240], [37, 4001, 999, 16000]):
        assert torch.equal(torch.cat(_stream_mel(audio, sizes)[0], dim=1), ref)


def _full_encoder(net, mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        x = net.encoder.stem(mel[None])
        frames = x + net.encoder.positional_embedding[: x.shape[1]]
        for block in net.encoder.blocks:
            frames, _, _ = block(frames, None)
        return net.encoder.ln_post(frames)


def test_stem_of_any_frame_range_equals_full_stem(tiny, audio):
    mel = log_mel_spectrogram(audio)[:, :901]  # odd frame count: the stem pads at the end
    with torch.inference_mode():
        ref = tiny.net.encoder.stem(mel[None])
        for j0, j1 in [(0, 1), (0, 17), (3, 40), (200, ref.shape[1]), (0, ref.shape[1])]:
            assert torch.allclose(stem_frames(tiny.net, mel, j0, j1), ref[:, j0:j1], atol=1e-4)
        # normalising only the frames read (the streaming path) gives the same frames
        power = mel_power(audio)[:, :901]
        top = float(power.max())
        assert torch.allclose(stem_frames(tiny.net, power, 3, 40, running_max=top),
                              stem_frames(tiny.net, normalize_frames(power, top), 3, 40), atol=1e-5)


def _run_stream(net, audio, chunk: int, lookahead: int | None) -> tuple[torch.Tensor, list[int]]:
    """Every frame's output (each as it was when finalised) and the cache length after each step."""
    mel_state, state, mels, cached, finals = MelState(), EncoderState.empty(net), [], [], []
    for i in range(0, len(audio), chunk):
        mels.append(push_audio(mel_state, audio[i:i + chunk]))
        mel = normalize_frames(torch.cat(mels, 1), mel_state.running_max)
        state = encode_step(net, state, mel, lookahead)
        finals.append(state.new_final)
        cached.append(state.cache.length)
    mels.append(push_audio(mel_state, np.zeros(0, np.float32), final=True))
    mel = normalize_frames(torch.cat(mels, 1), mel_state.running_max)
    state = encode_step(net, state, mel, lookahead, final=True)
    finals.append(state.new_final)
    assert state.provisional_out.shape[1] == 0 and state.finalized == sum(f.shape[1] for f in finals)
    return torch.cat(finals, dim=1), cached


@pytest.mark.slow
def test_incremental_encoder_with_unlimited_lookahead_equals_full_encoder(tiny_float32, audio):
    """In float32 (a bf16 encoder rounds products differently with the number of frames in a pass)."""
    tiny = tiny_float32
    clip = audio[: 16000 * 6]
    out, cached = _run_stream(tiny.net, clip, 5120, None)
    ref = _full_encoder(tiny.net, log_mel_spectrogram(clip)[:, : len(clip) // 160])
    assert out.shape == ref.shape
    assert (out - ref).abs().max() < 1e-3
    assert set(cached) == {0}  # nothing was final before the end


def test_incremental_encoder_caches_the_past_and_stays_close(tiny, audio):
    """With a finite look-ahead frames are finalised as audio arrives (the cache grows and
    only new frames are computed), and outputs stay close to the full encoder's."""
    clip = audio[: 16000 * 6]
    out, cached = _run_stream(tiny.net, clip, 5120, lookahead=10)
    assert cached == sorted(cached) and cached[-1] > 0 and len(set(cached)) > 3
    ref = _full_encoder(tiny.net, log_mel_spectrogram(clip)[:, : len(clip) // 160])
    assert out.shape == ref.shape
    cos = torch.nn.functional.cosine_similarity(out[0], ref[0], dim=-1)
    assert cos.mean() > 0.8


def test_silence_context_leaves_the_audio_frames_unchanged(tiny_float32, audio):
    """The silence after the audio is encoded as its continuation (it attends to the audio);
    the audio's frames never attend to it, so their outputs and cache are the same (in float32:
    a bf16 encoder rounds a frame's products differently with the number of frames in a pass)."""
    tiny = tiny_float32
    power = mel_power(audio[: 16000 * 4])[:, :400]
    top = float(power.max())
    plain = encode_step(tiny.net, EncoderState.empty(tiny.net), power, 20, running_max=top)
    with_silence = encode_step(tiny.net, EncoderState.empty(tiny.net), power, 20, running_max=top, silence=25)
    assert plain.silence_out is None and with_silence.silence_out.shape == (1, 25, tiny.net.dims.n_audio_state)
    assert torch.allclose(plain.outputs(), with_silence.outputs(), atol=1e-4)
    assert plain.cache.length == with_silence.cache.length
    # the continuation differs from silence encoded alone (it heard the speech)
    alone = tiny.net.encoder(torch.full((1, tiny.net.dims.n_mels, 3000), (top - 8 + 4) / 4))
    assert (with_silence.silence_out[0] - alone[0, 199:224]).abs().mean() > 0.05


def test_a_step_reuses_the_provisional_frames_stems_only_under_the_same_running_maximum(tiny_float32, audio):
    """A step computes the conv stem of its new frames only: the provisional frames' stems come
    from the step before (a frame's stem is final once its mel is), unless the running maximum
    that normalises them has risen since; and the silence continuation's frames past the third
    read the floor alone, so they share the third's stem. The outputs are those of computing
    every stem afresh (up to the conv's rounding for another frame range)."""
    net = tiny_float32.net
    power = mel_power(audio[: 16000 * 6])[:, :600]
    top = float(power.max())

    def fresh(state: EncoderState, mel: torch.Tensor, top: float) -> EncoderState:
        return encode_step(net, replace(state, stems=None), mel, 20, running_max=top, silence=25)

    first = encode_step(net, EncoderState.empty(net), power[:, :301], 20, running_max=top, silence=25)
    assert first.stems is not None and first.stems.shape[1] == first.provisional_out.shape[1] == 20
    assert first.stems_max == top
    reused = encode_step(net, first, power[:, :365], 20, running_max=top, silence=25)
    again = fresh(first, power[:, :365], top)
    assert torch.allclose(reused.outputs(), again.outputs(), atol=1e-4)
    assert (reused.silence_out - again.silence_out).abs().max() < 1e-3
    # a louder frame raised the maximum: the old stems are not reused
    louder = top + 1.0
    raised = encode_step(net, first, power[:, :365], 20, running_max=louder, silence=25)
    assert raised.stems_max == louder
    assert torch.allclose(raised.outputs(), fresh(first, power[:, :365], louder).outputs(), atol=1e-4)
    assert not torch.allclose(raised.outputs(), reused.outputs(), atol=1e-2)
