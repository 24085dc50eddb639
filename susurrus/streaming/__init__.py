"""Streaming: incremental front end and encoder, streaming decoder and commit policy."""
