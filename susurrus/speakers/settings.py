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
