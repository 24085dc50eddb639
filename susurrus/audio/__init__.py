"""Audio input: decoding and resampling."""

from susurrus.audio.io import SAMPLE_RATE, AudioDecodeError, decode_audio, resample

__all__ = ["SAMPLE_RATE", "AudioDecodeError", "decode_audio", "resample"]
