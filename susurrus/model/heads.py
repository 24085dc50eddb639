"""Alignment heads of OpenAI's Whisper models, for checkpoints that do not carry theirs.

Word timestamps and the streaming commit policy read the cross-attention of a few decoder heads
that follow the audio. Hugging Face checkpoints list them in ``generation_config.json`` and
CTranslate2 ones in ``config.json``, but OpenAI's ``.pt`` files do not (OpenAI's code keeps them
in a table by model name), nor do many fine-tuned checkpoints. A checkpoint without heads gets
those of the OpenAI model of its shape (a fine-tune keeps its base model's heads closely enough);
a shape OpenAI never released gets the reference's default, every head of the upper half of the
decoder layers.

The (layer, head) pairs are those of OpenAI's table (also in the ``generation_config.json`` of
each ``openai/whisper-*`` repository); large-v1 and large-v2 share a shape, so a checkpoint of
that shape gets large-v2's heads (the later and far more used of the two).
"""

from __future__ import annotations

from susurrus.model.whisper import ModelDims

# (n_mels, n_vocab, n_audio_state, n_audio_layer, n_text_layer) -> (name, heads)
KNOWN_HEADS: dict[tuple[int, int, int, int, int], tuple[str, list[tuple[int, int]]]] = {
    (80, 51864, 384, 4, 4): ("tiny.en", [(1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)]),
    (80, 51865, 384, 4, 4): ("tiny", [(2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)]),
    (80, 51864, 512, 6, 6): ("base.en", [(3, 3), (4, 7), (5, 1), (5, 5), (5, 7)]),
    (80, 51865, 512, 6, 6): ("base", [(3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)]),
    (80, 51864, 768, 12, 12): ("small.en", [
        (6, 6), (7, 0), (7, 3), (7, 8), (8, 2), (8, 5), (8, 7), (9, 0), (9, 4), (9, 8), (9, 10), (10, 0),
        (10, 1), (10, 2), (10, 3), (10, 6), (10, 11), (11, 2), (11, 4)]),
    (80, 51865, 768, 12, 12): ("small", [
        (5, 3), (5, 9), (8, 0), (8, 4), (8, 7), (8, 8), (9, 0), (9, 7), (9, 9), (10, 5)]),
    (80, 51864, 1024, 24, 24): ("medium.en", [
        (11, 4), (14, 1), (14, 12), (14, 14), (15, 4), (16, 0), (16, 4), (16, 9), (17, 12), (17, 14), (18, 7),
        (18, 10), (18, 15), (20, 0), (20, 3), (20, 9), (20, 14), (21, 12)]),
    (80, 51865, 1024, 24, 24): ("medium", [(13, 15), (15, 4), (15, 15), (16, 1), (20, 0), (23, 4)]),
    (80, 51865, 1280, 32, 32): ("large-v2", [
        (10, 12), (13, 17), (16, 11), (16, 12), (16, 13), (17, 15), (17, 16), (18, 4), (18, 11), (18, 19),
        (19, 11), (21, 2), (21, 3), (22, 3), (22, 9), (22, 12), (23, 5), (23, 7), (23, 13), (25, 5), (26, 1),
        (26, 12), (27, 15)]),
    (128, 51866, 1280, 32, 32): ("large-v3", [
        (7, 0), (10, 17), (12, 18), (13, 12), (16, 1), (17, 14), (19, 11), (21, 4), (24, 1), (25, 6)]),
    (128, 51866, 1280, 32, 4): ("large-v3-turbo", [(2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)]),
}


def known_heads(dims: ModelDims) -> tuple[str, list[tuple[int, int]]] | None:
    """``(OpenAI model name, its alignment heads)`` for a checkpoint of that model's shape."""
    found = KNOWN_HEADS.get((dims.n_mels, dims.n_vocab, dims.n_audio_state, dims.n_audio_layer,
                             dims.n_text_layer))
    if found is None or any(layer >= dims.n_text_layer or head >= dims.n_text_head for layer, head in found[1]):
        return None
    return found


def default_heads(dims: ModelDims) -> list[tuple[int, int]]:
    """The reference's default: every head of the upper half of the decoder layers."""
    return [(layer, head) for layer in range(dims.n_text_layer // 2, dims.n_text_layer)
            for head in range(dims.n_text_head)]
