"""Turning audio features into text: window decoding, long files, word timestamps."""
