"""What an audio file's first bytes say it is, without decoding it (and without PyTorch): the
command line refuses a file that is no audio before it loads a model, and ``susurrus stream -``
tells a WAV, FLAC, OGG or MP3 file piped in from raw PCM."""

from __future__ import annotations

import shutil
import subprocess

HEAD_BYTES = 16  # enough for every signature below


def sniff(head: bytes) -> str | None:
    """The container or codec ``head`` (a file's first bytes) starts, or None: ``wav`` (RIFF,
    RF64, Wave64), ``flac``, ``ogg`` (Vorbis, Opus, FLAC in OGG), ``mp3`` (an ID3 tag or an MPEG
    audio frame; ADTS AAC frames look the same), ``mp4`` (M4A, MOV), ``webm`` (Matroska),
    ``aiff``, ``au``, ``caf``, ``asf`` (WMA), ``amr``, ``wavpack``, ``ape``, ``nist``."""
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE" or head[:4] == b"riff":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3" or _mpeg_frame(head):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "mp4"
    signatures = {b"\x1a\x45\xdf\xa3": "webm", b".snd": "au", b"caff": "caf", b"\x30\x26\xb2\x75": "asf",
                  b"#!AM": "amr", b"wvpk": "wavpack", b"MAC ": "ape", b"NIST": "nist"}
    if head[:4] in signatures:
        return signatures[head[:4]]
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    return None


def _mpeg_frame(head: bytes) -> bool:
    """Whether ``head`` starts with a valid MPEG audio Layer III frame header (an MP3 without an
    ID3 tag): the sync bits and no reserved version, bitrate, sample rate or emphasis. Strict, as
    raw PCM may start with 0xFF bytes (a 16-bit sample of -1 is FF FF, and is not a frame)."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    version, layer = (head[1] >> 3) & 3, (head[1] >> 1) & 3
    bitrate, rate = head[2] >> 4, (head[2] >> 2) & 3
    return version != 1 and layer == 1 and 0 < bitrate < 15 and rate != 3 and head[3] & 3 != 2


def have_ffmpeg() -> bool:
    """Whether an ``ffmpeg`` binary is on PATH (it reads formats libsndfile does not)."""
    return shutil.which("ffmpeg") is not None


def ffmpeg_reads_audio(path: str) -> bool:
    """Whether an installed ffmpeg finds an audio stream in the file at ``path`` and decodes its
    first packet (a file with no header :func:`sniff` knows, before any model loads): ffmpeg
    decodes ~0.1 s of it to nowhere. False without ffmpeg, or when it fails or takes over 10 s."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return False
    cmd = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", path,
           "-map", "0:a:0", "-t", "0.1", "-f", "null", "-"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
