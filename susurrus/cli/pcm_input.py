"""Raw PCM on standard input for ``susurrus stream -``: any rate and channel count, as declared
with ``--rate``, ``--channels`` and ``--pcm-format``, turned into 16 kHz mono float32 blocks.

The input cannot say what it is, so what can be checked is: a WAV file piped in (its header is
read and its own format used, with a warning if it contradicts the options), an encoded file
piped in (FLAC, OGG, MP3, ... told by its first bytes: decoded by ffmpeg as it arrives where
ffmpeg is installed, else read whole and decoded with libsndfile), an input that ends
in the middle of a frame (the channel count or sample format is likely wrong), and float32 input
whose values cannot be audio (it is likely 16-bit).
"""

from __future__ import annotations

import contextlib
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from susurrus.audio.sniff import have_ffmpeg, sniff

SAMPLE_RATE = 16000
HEAD_BYTES = 12  # a WAV's RIFF header; enough to tell every format :func:`sniff` knows
SOUNDFILE_READS = frozenset({"flac", "ogg", "mp3", "aiff", "au", "caf", "nist"})  # libsndfile >= 1.1


class InputError(ValueError):
    """Standard input that cannot be transcribed (a format nothing here decodes): one line for the user."""


@dataclass(frozen=True)
class PcmFormat:
    sample: str = "s16le"  # or "f32le"
    rate: int = SAMPLE_RATE
    channels: int = 1

    @property
    def width(self) -> int:
        return 2 if self.sample == "s16le" else 4

    @property
    def frame_bytes(self) -> int:
        return self.width * self.channels

    def describe(self) -> str:
        return f"{self.sample}, {self.rate} Hz, {self.channels} channel{'s' if self.channels > 1 else ''}"


def _wav_header(head: bytes, source: BinaryIO) -> tuple[PcmFormat | None, bytes]:
    """``head`` starts a RIFF/WAVE file: its format and the bytes after the ``data`` chunk's header
    (read on from ``source`` as needed). Format None: not PCM16 or float32."""
    buf = head
    fmt: PcmFormat | None = None
    pos = 12
    while True:
        while len(buf) < pos + 8:
            more = source.read(4096)
            if not more:
                return fmt, b""
            buf += more
        chunk, size = buf[pos:pos + 4], struct.unpack("<I", buf[pos + 4:pos + 8])[0]
        if chunk == b"data":
            return fmt, buf[pos + 8:]
        while len(buf) < pos + 8 + size:
            more = source.read(4096)
            if not more:
                return fmt, b""
            buf += more
        if chunk == b"fmt ":
            tag, channels, rate = struct.unpack("<HHI", buf[pos + 8:pos + 16])
            bits = struct.unpack("<H", buf[pos + 22:pos + 24])[0]
            if tag == 0xFFFE and size >= 40:  # WAVE_FORMAT_EXTENSIBLE: the real tag starts the sub-format
                tag = struct.unpack("<H", buf[pos + 32:pos + 34])[0]
            sample = {(1, 16): "s16le", (3, 32): "f32le"}.get((tag, bits))
            fmt = PcmFormat(sample, rate, channels) if sample else None
        pos += 8 + size + (size & 1)


def read_pcm(source: BinaryIO, declared: PcmFormat, block_samples: int, *, explicit: bool = True,
             warn: Callable[[str], None] | None = None) -> Iterator[np.ndarray]:
    """Blocks of 16 kHz mono float32 (about ``block_samples`` each) from raw PCM in ``declared``
    format on ``source``; ``explicit``: the user gave the format (else a WAV header's wins silently)."""
    from susurrus.audio.resampler import StreamResampler

    warn = warn or (lambda message: print(f"susurrus stream: warning: {message}", file=sys.stderr))
    fmt = declared
    head = _read_full(source, HEAD_BYTES)
    kind = sniff(head)
    if kind not in (None, "wav"):  # an encoded file piped in: decoded, never read as PCM
        if explicit:
            warn(f"standard input is {kind.upper()} audio, not raw PCM: decoding it (--pcm-format, --rate and "
                 "--channels describe raw PCM only)")
        yield from compressed_blocks(head, source, kind, block_samples, warn)
        return
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        wav, head = _wav_header(head, source)
        if wav is None:
            raise InputError("standard input is a WAV file that is neither 16-bit nor float32 PCM: pass it as a "
                             "file name instead of '-'")
        if explicit and wav != declared:
            warn(f"standard input is a WAV file of {wav.describe()}, not the declared {declared.describe()}: "
                 "reading it as the file says")
        fmt = wav
    resampler = StreamResampler(fmt.rate, SAMPLE_RATE) if fmt.rate != SAMPLE_RATE else None
    dtype = np.dtype("<i2") if fmt.sample == "s16le" else np.dtype("<f4")
    want = max(1, block_samples * fmt.rate // SAMPLE_RATE) * fmt.frame_bytes
    carry = head
    checked = False
    while True:
        data = source.read(want)
        if not data:
            break
        data = carry + data
        usable = len(data) - len(data) % fmt.frame_bytes
        carry = data[usable:]
        samples = np.frombuffer(data[:usable], dtype=dtype).reshape(-1, fmt.channels)
        with np.errstate(invalid="ignore", over="ignore"):  # 16-bit data read as float32 holds NaNs
            mono = samples.astype(np.float32).mean(axis=1)
        if fmt.sample == "s16le":
            mono /= 32768.0
        else:
            if not checked and len(mono):
                checked = True
                if not np.isfinite(mono).all() or np.abs(mono).max() > 16.0:
                    warn("the input does not look like float32 PCM (values far outside -1..1): is it s16le? "
                         "(--pcm-format)")
            mono = np.nan_to_num(mono, nan=0.0, posinf=0.0, neginf=0.0)
        yield resampler.process(mono) if resampler is not None else mono
    if carry:
        warn(f"the input ended {len(carry)} bytes into a {fmt.frame_bytes}-byte frame: is it really "
             f"{fmt.describe()}? (--pcm-format, --rate, --channels)")
    if resampler is not None:
        tail = resampler.flush()
        if len(tail):
            yield tail


def _read_full(source: BinaryIO, n: int) -> bytes:
    """``n`` bytes from ``source`` (fewer only at its end): a pipe may hand over less per read."""
    data = b""
    while len(data) < n:
        more = source.read(n - len(data))
        if not more:
            break
        data += more
    return data


def compressed_blocks(head: bytes, source: BinaryIO, kind: str, block_samples: int,
                      warn: Callable[[str], None]) -> Iterator[np.ndarray]:
    """16 kHz mono float32 blocks of an encoded file (FLAC, OGG, MP3, ...) arriving on ``source``
    after ``head``: decoded as it arrives by ffmpeg where it is installed (a live source stays
    live), else read to its end and decoded with libsndfile (FLAC, OGG, MP3), which needs the
    whole file; a format only ffmpeg reads is refused."""
    if have_ffmpeg():
        yield from _ffmpeg_blocks(head, source, block_samples)
        return
    if kind not in SOUNDFILE_READS:
        raise InputError(f"standard input is {kind.upper()} audio, which only ffmpeg decodes, and ffmpeg is not "
                         "installed: install it, or convert the audio to WAV or FLAC")
    warn(f"standard input is {kind.upper()} audio: without ffmpeg it is read to its end before it is transcribed "
         "(install ffmpeg to transcribe it as it arrives)")
    chunks = [head]
    while True:
        more = source.read(1 << 16)
        if not more:
            break
        chunks.append(more)
    from susurrus.audio.io import AudioDecodeError, decode_audio

    try:
        audio = decode_audio(b"".join(chunks))
    except AudioDecodeError as err:
        raise InputError(f"standard input is {kind.upper()} audio that could not be decoded "
                         f"({str(err).split('(', 1)[-1].rstrip(')')})") from None
    for at in range(0, len(audio), block_samples):
        yield audio[at:at + block_samples]


def _ffmpeg_blocks(head: bytes, source: BinaryIO, block_samples: int) -> Iterator[np.ndarray]:
    """Decode with an ffmpeg subprocess: a thread copies ``source`` into its stdin while its
    16 kHz mono s16le output is read here, block by block."""
    import shutil
    import subprocess
    import threading

    proc = subprocess.Popen([shutil.which("ffmpeg") or "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
                             "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", str(SAMPLE_RATE), "pipe:1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def copy() -> None:
        try:
            proc.stdin.write(head)
            while True:
                more = source.read(1 << 14)
                if not more:
                    break
                proc.stdin.write(more)
        except (BrokenPipeError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    feeder = threading.Thread(target=copy, daemon=True)
    feeder.start()
    try:
        while True:
            data = _read_full(proc.stdout, block_samples * 2)
            if not data:
                break
            yield np.frombuffer(data[:len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
    finally:
        proc.stdout.close()
        if proc.wait() not in (0, -15) and proc.returncode is not None:
            detail = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:]
            if detail:
                print(f"susurrus stream: warning: ffmpeg: {detail[0]}", file=sys.stderr)


def declared_format(sample: str, rate: int, channels: int) -> PcmFormat:
    return PcmFormat(sample, rate, channels)
