"""Whisper: the network, its weights and its tokenizer."""
