"""A multilingual stream's language, decided per window when none was given (``StreamSession``
applies it): as soon as the decoder is sure of one over the stream's own encoding, or after
``detect_ms`` as Whisper decides it offline."""

from __future__ import annotations

import torch

from susurrus.audio.features import normalize, pad_or_trim
from susurrus.decoding.decode import detect_language
from susurrus.model.caches import KV, DecoderCache
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper
from susurrus.streaming.config import DETECT_SURE


def window_language(net: Whisper, tokenizer: Tokenizer, cross: list[KV], mel: torch.Tensor,
                    running_max: float, sure_only: bool) -> tuple[str, float] | None:
    """The window's language and its probability. Whisper's way: the decoder's first
    prediction over a full (bidirectional) encoding of the window's audio ``mel`` so far,
    padded to 30 s (one extra encode per window). ``sure_only``: over the stream's own
    encoding (``cross``, the cross-attention buffer: one decoder token), and only a language
    the decoder gives ``DETECT_SURE``; otherwise None."""
    if sure_only:
        ranked = detect_language(net, tokenizer, cache=DecoderCache(cross, [None] * len(net.decoder.blocks)))
        return ranked[0] if ranked[0][1] >= DETECT_SURE else None
    audio = net.embed_audio(pad_or_trim(normalize(mel, running_max))[None])
    return detect_language(net, tokenizer, audio)[0]
