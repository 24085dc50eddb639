"""A Realtime session's speaker settings: its ``susurrus`` extension's speaker keys read into a
:class:`~susurrus.speakers.settings.Diarization` (the server's side of ``speakers/``: the
protocol's errors live here, not in the speakers' package)."""

from __future__ import annotations

from susurrus.server.realtime.protocol import INVALID_VALUE, ProtocolError
from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_NAMES, Diarization

SPEAKER_KEYS = ("diarize", "speakers", "min_speakers", "max_speakers", "speaker_encoder")


def parse_diarization(ext: dict, current: Diarization | None) -> Diarization | None:
    """A Realtime session's ``susurrus`` extension: ``{"diarize": true, "speakers": N,
    "min_speakers": N, "max_speakers": N, "speaker_encoder": "campplus" | "ge2e"}`` (counts
    optional, null for unknown; the encoder CAM++ unless given); ``diarize: false`` turns labels
    off. A bad value raises the protocol's ``invalid_value`` error."""
    on = ext.get("diarize", current is not None)
    if not isinstance(on, bool):
        raise ProtocolError(INVALID_VALUE, "susurrus.diarize must be true or false", "session.susurrus.diarize")
    encoder = ext.get("speaker_encoder", current.encoder if current else DEFAULT_ENCODER)
    if encoder not in ENCODER_NAMES:
        raise ProtocolError(INVALID_VALUE, f"susurrus.speaker_encoder must be one of {', '.join(ENCODER_NAMES)}",
                            "session.susurrus.speaker_encoder")
    if current is not None and current.refs and encoder != current.encoder:
        raise ProtocolError(INVALID_VALUE, "susurrus.speaker_encoder cannot change once speakers are enrolled",
                            "session.susurrus.speaker_encoder")
    counts = {}
    for key in SPEAKER_KEYS[1:4]:
        v = ext.get(key, getattr(current, key) if current else None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ProtocolError(INVALID_VALUE, f"susurrus.{key} must be a whole number of at least 1, or null",
                                f"session.susurrus.{key}")
        counts[key] = v
    if not on:
        return None
    if counts["min_speakers"] and counts["max_speakers"] and counts["max_speakers"] < counts["min_speakers"]:
        raise ProtocolError(INVALID_VALUE, "susurrus.max_speakers is below min_speakers",
                            "session.susurrus.max_speakers")
    return Diarization(**counts, refs=current.refs if current else (), encoder=encoder)
