"""OpenAI's audio REST API: ``/v1/audio/transcriptions`` and ``/v1/audio/translations``."""
