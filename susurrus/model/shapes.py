"""OpenAI's Whisper shapes, and random weights of any of them: ``load_model("random:large-v3-turbo")``.

A model of a released shape with random weights (seed 0, the same every time) costs what the
real one costs, in time and memory, and reads nothing: the benchmarks and tests of shapes that
are not embedded here (no network to fetch their weights) run on these. Its text is noise; its
alignment heads are the released model's, so the streaming policy reads the same heads.
"""

from __future__ import annotations

import torch

from susurrus.model.whisper import ModelDims, Whisper

RANDOM = "random:"

# name -> dims (n_mels, audio ctx, width, heads, layers, vocab, text ctx, width, heads, layers)
SHAPES: dict[str, ModelDims] = {
    "tiny.en": ModelDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4),
    "tiny": ModelDims(80, 1500, 384, 6, 4, 51865, 448, 384, 6, 4),
    "base.en": ModelDims(80, 1500, 512, 8, 6, 51864, 448, 512, 8, 6),
    "base": ModelDims(80, 1500, 512, 8, 6, 51865, 448, 512, 8, 6),
    "small": ModelDims(80, 1500, 768, 12, 12, 51865, 448, 768, 12, 12),
    "medium": ModelDims(80, 1500, 1024, 16, 24, 51865, 448, 1024, 16, 24),
    "large-v2": ModelDims(80, 1500, 1280, 20, 32, 51865, 448, 1280, 20, 32),
    "large-v3": ModelDims(128, 1500, 1280, 20, 32, 51866, 448, 1280, 20, 32),
    "large-v3-turbo": ModelDims(128, 1500, 1280, 20, 32, 51866, 448, 1280, 20, 4),
}


def random_state(dims: ModelDims, seed: int = 0) -> dict[str, torch.Tensor]:
    """A Whisper state dict of ``dims`` drawn from ``seed`` (PyTorch's default initialisation,
    the decoder's positions drawn too: they are a parameter, left empty by the constructor)."""
    with torch.random.fork_rng():  # the caller's random state is left as it was
        torch.manual_seed(seed)
        net = Whisper(dims)
        torch.nn.init.normal_(net.decoder.positional_embedding, std=0.02)
    return net.state_dict()
