"""Encoded audio piped into ``susurrus stream -`` (OGG, MP3, FLAC: told by its first bytes) is
decoded and transcribed as the same file given by name is, never read as raw PCM (which gave an
empty transcript); what nothing here decodes is refused with a line saying so."""

from __future__ import annotations

import io
import sys
import types

import pytest
import soundfile as sf
from server_helpers import stream_text

from susurrus.audio.io import decode_audio
from susurrus.audio.sniff import sniff
from susurrus.cli.main import main

JFK = "jfk_inaugural"  # 11 s, ends "... ask what you can do for your country."
# the pause before the last phrase (7.78-8.17 s): its last 3 s, "ask what you can do for your country."
# (the decode path is the same for any length; eight words to compare with the file's stream)
LAST_PHRASE = int(7.95 * 16000)


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(data)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_encoded_audio_on_stdin_streams_like_the_file(fmt, subtype, capsys, monkeypatch, dev_item, tiny, tmp_path):
    audio = decode_audio(dev_item(JFK).audio)[LAST_PHRASE:]
    encoded = tmp_path / f"jfk.{fmt.lower()}"
    sf.write(encoded, audio, 16000, format=fmt, subtype=subtype)
    data = encoded.read_bytes()
    assert sniff(data[:12]) == fmt.lower()
    _stdin(monkeypatch, data)
    assert main(["stream", "-", "--quiet", "-f", "txt", "-o", str(tmp_path)]) == 0
    text = " ".join((tmp_path / "stdin.txt").read_text().split())  # a line per cue, as transcribe's txt
    assert text == stream_text(tiny, decode_audio(encoded))  # as the file given by name streams
    assert text.endswith("for your country.")
    assert "half" not in capsys.readouterr().err  # never read as PCM


def test_raw_pcm_is_not_taken_for_mp3():
    assert sniff(b"\xff\xff\x10\x00" * 3) is None  # 16-bit samples of -1 and 16: no frame header
    assert sniff(b"\xff\xfb\x90\x64" + bytes(8)) == "mp3"  # MPEG-1 Layer III, 128 kbit/s, 44.1 kHz


def test_audio_nothing_here_decodes_is_refused_with_a_line(capsys, monkeypatch, tmp_path):
    from susurrus.audio import sniff as sniff_module

    monkeypatch.setattr(sniff_module.shutil, "which", lambda name: None)  # no ffmpeg
    _stdin(monkeypatch, b"\x00\x00\x00\x20ftypM4A " + bytes(4000))
    assert main(["stream", "-", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("susurrus stream: error: standard input is MP4 audio, which only ffmpeg decodes")
