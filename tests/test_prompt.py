"""A prompt conditions the decoder, offline and streaming, as Whisper's initial prompt does."""

from __future__ import annotations

import pytest

from susurrus.audio.io import decode_audio

TERMS = "Sweynheim and Pannartz, Subiaco."


def _stream(model, audio, **settings) -> str:
    stream = model.stream(**settings)
    for i in range(0, len(audio), 8000):
        stream.feed(audio[i:i + 8000])
    stream.finish()
    return stream.text


@pytest.mark.slow
def test_a_prompt_spells_a_rare_name_offline_and_streaming(tiny, dev_item):
    """LJ001-0031 names the monastery of Subiaco, which tiny.en hears as "Subiakal"."""
    audio = decode_audio(dev_item("ljspeech_LJ001-0031").audio)
    offline = "".join(s.text for s in tiny.transcribe(audio, beam_size=1)[0])
    prompted = "".join(s.text for s in tiny.transcribe(audio, beam_size=1, initial_prompt=TERMS)[0])
    assert "Subiaco" not in offline and "Subiaco" in prompted
    assert "Subiaco" not in _stream(tiny, audio)
    streamed = _stream(tiny, audio, prompt=TERMS)
    assert "Subiaco" in streamed and "Rome" in streamed


def test_the_prompt_is_not_transcribed_and_survives_a_reanchor(tiny, dev_item):
    """The prompt is context, never output; a stream longer than a window keeps it."""
    audio = decode_audio(dev_item("ljspeech_LJ001-0031").audio)
    stream = tiny.stream(prompt=TERMS, max_window_s=5.0)
    for i in range(0, len(audio), 8000):
        stream.feed(audio[i:i + 8000])
    stream.finish()
    assert "Pannartz" not in stream.text.split("Subiaco")[-1]  # not repeated after the speech
    assert stream._prompt()[1:1 + len(stream._given_prompt)] == stream._given_prompt
