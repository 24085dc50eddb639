"""susurrus: live speech-to-text with Whisper, incremental from the audio up."""

from susurrus.api import WhisperModel, load_model
from susurrus.streaming.session import Committed, Interim, StreamConfig, StreamSession, StreamWord
from susurrus.types import Segment, TranscriptionInfo, Word

__all__ = ["Committed", "Interim", "Segment", "StreamConfig", "StreamSession", "StreamWord", "TranscriptionInfo",
           "Word", "WhisperModel", "load_model"]
__version__ = "0.1.0"
