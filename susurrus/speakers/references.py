"""Enrolment: a named reference clip per known speaker (``--speaker-ref NAME=clip.wav``), as
OpenAI's ``known_speaker_names`` / ``known_speaker_references``. A clip must be readable audio
with at least ``MIN_VOICED_S`` of speech (Silero VAD); anything else is refused with an error that
names the clip and says why."""

from __future__ import annotations

from os import PathLike

import numpy as np

from susurrus.speakers.encoder import SAMPLE_RATE, embed_utterance
from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_SPECS

MIN_VOICED_S = 2.0  # ~1.3 GE2E partials of speech: less gives an unreliable voice print


class SpeakerReferenceError(ValueError):
    pass


def parse_reference_args(values: list[str] | None) -> dict[str, str]:
    """``["NAME=clip.wav", ...]`` -> ``{NAME: clip.wav}``; a malformed or repeated name is an error."""
    refs: dict[str, str] = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SpeakerReferenceError(f"--speaker-ref {v!r}: expected NAME=clip.wav")
        if name.strip() in refs:
            raise SpeakerReferenceError(f"--speaker-ref: the name {name.strip()!r} is given twice")
        refs[name.strip()] = path.strip()
    return refs


def voiced_audio(x: np.ndarray) -> np.ndarray:
    """The clip's speech: Silero VAD frames with probability >= 0.5."""
    from susurrus.streaming.vad import FRAME_SAMPLES, VadState, load_vad, push_vad

    probs = push_vad(load_vad(), VadState(), x, final=True)
    keep = np.repeat(probs >= 0.5, FRAME_SAMPLES)[: len(x)]
    return x[: len(keep)][keep]


def load_reference(name: str, clip: str | PathLike | np.ndarray, encoder: str = DEFAULT_ENCODER) -> np.ndarray:
    """The unit voice print of ``name`` from its clip (a path or 16 kHz samples, or a voice
    print already made by ``encoder``)."""
    if isinstance(clip, np.ndarray) and clip.ndim == 1 and len(clip) == ENCODER_SPECS[encoder].dim:
        return clip.astype(np.float32) / np.linalg.norm(clip)
    what = f"speaker reference {name!r}" + ("" if isinstance(clip, np.ndarray) else f" ({clip})")
    if isinstance(clip, np.ndarray):
        x = clip.astype(np.float32)
    else:
        from susurrus.audio.io import decode_audio

        try:
            x = decode_audio(str(clip))
        except Exception as e:  # noqa: BLE001 (any decoder failure is the clip's)
            raise SpeakerReferenceError(f"{what}: not readable audio ({e})") from e
    if len(x) == 0 or float(np.abs(x).max()) < 1e-4:
        raise SpeakerReferenceError(f"{what}: the clip is silence")
    speech = voiced_audio(x)
    if len(speech) < MIN_VOICED_S * SAMPLE_RATE:
        raise SpeakerReferenceError(f"{what}: too short: {len(speech) / SAMPLE_RATE:.1f} s of speech, "
                                    f"at least {MIN_VOICED_S:.0f} s needed")
    return embed_utterance(speech, encoder)
