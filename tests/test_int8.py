"""``compute_type="int8"``: the blocks' linear layers on int8 weights, offline and streaming."""

from __future__ import annotations

import pytest
import torch

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import error_counts


@pytest.fixture
def one_thread():
    """One torch thread for this test (on a busy 2-core machine two threads made it ~5x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_int8_model_transcribes_and_streams_a_dev_item_close_to_float32(dev_item, tiny, one_thread):
    import susurrus
    from susurrus.audio.features import log_mel_spectrogram, pad_or_trim
    from susurrus.model.layers import Linear

    model = susurrus.load_model("tiny.en", compute_type="int8")
    assert model.compute_type == "int8"
    net = model.net
    # every linear layer of both sides' blocks is quantised; stem, norms and embeddings stay float
    assert not any(isinstance(m, Linear) for m in net.modules())
    quantised = [m for m in net.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    d = net.dims
    assert len(quantised) == 6 * d.n_audio_layer + 10 * d.n_text_layer
    assert net.encoder.conv1.weight.dtype == torch.float32
    assert torch.equal(net.decoder.token_embedding.weight, tiny.net.decoder.token_embedding.weight)

    item = dev_item("ljspeech_LJ001-0001")  # 9.7 s, 26 words
    audio = decode_audio(item.audio)
    with torch.inference_mode():  # the encoder really runs on other weights, and stays close
        mel = pad_or_trim(log_mel_spectrogram(audio))[None]
        ref, q = tiny.net.embed_audio(mel), net.embed_audio(mel)
    assert 0 < float((q - ref).norm() / ref.norm()) < 0.3  # 0.17 measured (7-bit activations)

    def offline(m) -> str:
        return " ".join(s.text.strip() for s in m.transcribe(audio, beam_size=1)[0])

    float_text, int8_text = offline(tiny), offline(model)
    errors, words = error_counts(float_text, int8_text)
    assert errors <= 2, (float_text, int8_text)  # at most two of 26 words differ
    assert error_counts(item.text, int8_text)[0] <= error_counts(item.text, float_text)[0] + 2

    # streaming calls the quantised modules too (its encoder steps and decoder passes), and
    # commits text close to the float32 model's offline transcription
    stream = model.stream()
    block = 640 * 16
    list(stream.events(audio[i:i + block] for i in range(0, len(audio), block)))
    errors, words = error_counts(float_text, stream.text)
    assert errors <= 3, (float_text, stream.text)


def test_compute_type_is_checked_and_the_cli_offers_the_same_ones():
    import susurrus
    from susurrus.api import AUTO, COMPUTE_TYPES
    from susurrus.cli import main as cli

    assert cli.COMPUTE_TYPES == list(COMPUTE_TYPES) and cli.AUTO == AUTO
    with pytest.raises(ValueError, match="compute_type"):
        susurrus.load_model("tiny.en", compute_type="int4")
    for command in ("transcribe", "stream", "serve", "bench"):
        args = cli.build_parser().parse_args([command, "x", "--compute-type", "int8"] if command != "serve"
                                             else [command, "--compute-type", "int8"])
        assert args.compute_type == "int8"
