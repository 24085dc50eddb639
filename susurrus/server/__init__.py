"""The server: OpenAI's Realtime transcription over WebSocket, its audio REST API, the worker pool that
runs the model, Ray Serve scale-out, metrics and access control."""
