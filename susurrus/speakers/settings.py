"""A stream's speaker settings as a plain value (``StreamConfig.diarization``): picklable, so a
stream opened in a worker process (the server's) gets them too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncoderSpec:
    """What a speaker encoder is to the rest of the package: its voice print's size, the hop
    between a stream's windows, its two same-speaker thresholds (cosine similarity at the
    equal-error point over the shared data's 40 speakers' 1.6 s partials, ``python -m
    susurrus.speakers.threshold --encoder NAME``: pairs, and one embedding against the centroid
    of 8 others) and whether a stream finds speakers by clustering every window again
    (``cluster.Reclustered``) or window by window (``cluster.OnlineClusters``)."""

    dim: int
    hop_s: float
    same_pair: float
    same_centroid: float
    recluster: bool


# the speaker encoders by name (speakers/encoder.py, speakers/campplus.py; here, where nothing
# heavy is imported, for the command line's choices). CAM++, the default: pairs 0.310 (EER
# 1.8 %), centroid 0.325 (EER 1.0 %), 2-4x GE2E's CPU a window in float32 (~1x in bfloat16
# on OpenVINO, where the CPU has AMX), so one a second (the fewest
# for which a window reaches every word by the time it commits, ~1 s after its end). GE2E: pairs
# 0.582 (EER 7.9 %), centroid 0.684 (EER 1.0 %), two windows a second.
ENCODER_SPECS = {"campplus": EncoderSpec(192, 1.0, 0.31, 0.33, recluster=True),
                 "ge2e": EncoderSpec(256, 0.5, 0.58, 0.68, recluster=False)}
ENCODER_NAMES = tuple(ENCODER_SPECS)
DEFAULT_ENCODER = ENCODER_NAMES[0]


@dataclass(frozen=True)
class Diarization:
    speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    refs: tuple[tuple[str, tuple[float, ...]], ...] = ()  # enrolled names and their voice prints
    encoder: str = DEFAULT_ENCODER

    def as_dict(self) -> dict:
        return {"diarize": True, "speakers": self.speakers, "min_speakers": self.min_speakers,
                "max_speakers": self.max_speakers, "speaker_encoder": self.encoder,
                "speaker_names": [n for n, _ in self.refs]}


SPEAKER_KEYS = ("diarize", "speakers", "min_speakers", "max_speakers", "speaker_encoder")


def parse_diarization(ext: dict, current: Diarization | None) -> Diarization | None:
    """A Realtime session's ``susurrus`` extension: ``{"diarize": true, "speakers": N,
    "min_speakers": N, "max_speakers": N, "speaker_encoder": "campplus" | "ge2e"}`` (counts
    optional, null for unknown; the encoder CAM++ unless given); ``diarize: false`` turns labels
    off. A bad value raises the protocol's ``invalid_value`` error."""
    from susurrus.server.realtime.protocol import INVALID_VALUE, ProtocolError

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
