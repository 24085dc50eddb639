"""The bench's offline reference: the same model's transcription of an item, as ``susurrus
transcribe --beam-size 1`` makes it, kept between runs in a JSON cache (``--offline-cache``)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from susurrus.evaluation import spread
from susurrus.types import Word


def offline_reference(model, audio: np.ndarray, language: str | None) -> tuple[str, list[Word]]:
    """The same model's default offline transcription (greedy, with the temperature fallback,
    previous-text conditioning and the voice activity gate, as ``susurrus transcribe --beam-size 1``),
    and its words."""
    segments, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, language=language)
    segments = list(segments)
    return " ".join(s.text.strip() for s in segments), [w for s in segments for w in s.words or []]


def offline_key(model, item_id: str, n_samples: int, language: str | None) -> str:
    """An offline transcription's key in the cache (``--offline-cache``): model, item, audio
    length and the language given (None: English-only, or detected); a compute type other than
    float32 is part of the model's name (its products round differently), and so is a device
    other than the CPU."""
    compute = getattr(model, "compute_type", "float32")
    name = model.name if compute == "float32" else f"{model.name}@{compute}"
    device = str(getattr(model, "device", "cpu"))
    name = name if device == "cpu" else f"{name}@{device}"
    # offline behind the voice activity gate, as transcribe runs it ("gate2": since the gate makes
    # no cut under 1 s and cuts on the mel hop; an older cache's readings are not reused)
    return f"{name}|{item_id}|{n_samples}|{language}|gate2"


def cached_offline(model, cache: dict, item_id: str, audio: np.ndarray, language: str | None, lead: int = 0,
                   ) -> tuple[str, list[Word]]:
    """The item's offline reference (:func:`offline_reference`) from ``cache`` (see
    :func:`load_offline_cache`), transcribed and added to it when missing; ``lead``: of the audio
    with that many samples of digital silence before it (:func:`spread.shifted`)."""
    key = offline_key(model, item_id, len(audio), language)
    if lead:
        key, audio = spread.shifted_key(key, lead), spread.shifted(audio, lead)
    if key not in cache:
        text, words = offline_reference(model, audio, language)
        cache[key] = [text, [asdict(w) for w in words]]
    text, words = cache[key]
    return text, [Word(**w) for w in words]


def load_offline_cache(path: str | None) -> dict:
    """The offline transcriptions kept between runs (``{key: [text, [word dicts]]}``), or an
    empty cache when ``path`` is None, missing or unreadable."""
    try:
        with open(path) as f:  # type: ignore[arg-type]
            return json.load(f)
    except (TypeError, FileNotFoundError, json.JSONDecodeError):
        return {}
