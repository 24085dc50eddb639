"""OpenAI's Realtime transcription protocol: messages, session settings, items, the model side."""
