"""Raw PCM on standard input for ``susurrus stream -``: any rate and channel count, as declared
with ``--rate``, ``--channels`` and ``--pcm-format``, turned into 16 kHz mono float32 blocks.

The input cannot say what it is, so what can be checked is: a WAV file piped in (its header is
read and its own format used, with a warning if it contradicts the options), an input that ends
in the middle of a frame (the channel count or sample format is likely wrong), and float32 input
whose values cannot be audio (it is likely 16-bit).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

SAMPLE_RATE = 16000


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
    head = source.read(12)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        wav, head = _wav_header(head, source)
        if wav is None:
            raise ValueError("standard input is a WAV file that is neither 16-bit nor float32 PCM: pass it as a "
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


def declared_format(sample: str, rate: int, channels: int) -> PcmFormat:
    return PcmFormat(sample, rate, channels)
