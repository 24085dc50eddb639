"""How far the offline reference moves from itself, item by item: the noise floor of comparing a
stream with offline per item.

On short items one word is many WER points, and offline Whisper's own text moves with harmless
changes of its input: one mel frame (10 ms) of digital silence before the audio puts as many
items more than 15 points below offline as a whole decoding change does (beam search:
docs/benchmarks.md, "Hard speech, per condition, and long-form"; docs/journal/2026-12.md,
"how far offline moves from itself"). ``susurrus bench
--offline-spread`` transcribes every item that way too and reports, beside the stream's count of
items more than 15 points worse (and better) than offline, the count the one-frame shift alone
gives: a stream's item-level spread can then be read against the reference's own.
"""

from __future__ import annotations

import numpy as np

from susurrus.audio.features import HOP_LENGTH

SHIFT_SAMPLES = HOP_LENGTH  # one mel frame: 10 ms at 16 kHz
WORSE_POINTS = 15.0  # the per-item bar the bench's tables count against


def shifted(audio: np.ndarray, samples: int = SHIFT_SAMPLES) -> np.ndarray:
    """``audio`` with ``samples`` of digital silence before it."""
    return np.concatenate([np.zeros(samples, np.float32), np.asarray(audio, np.float32)])


def shifted_key(key: str, samples: int = SHIFT_SAMPLES) -> str:
    """The offline cache key of an item's shifted transcription, from its own key."""
    return f"{key}|lead{samples}"


def counts(pairs: list[tuple[float, float]], points: float = WORSE_POINTS) -> tuple[int, int]:
    """Of ``(wer, offline_wer)`` per item: how many are more than ``points`` worse, how many
    more than ``points`` better."""
    return (sum(w - o > points for w, o in pairs), sum(o - w > points for w, o in pairs))


HEADER = (f"| setting | items | stream: items > {WORSE_POINTS:g} points worse / better than offline | offline 10 ms "
          f"later: items > {WORSE_POINTS:g} points worse / better | offline 10 ms later: WER % | offline WER % |\n"
          "|---|---|---|---|---|---|")
