"""Tests for susurrus.audio.io: decoding, down-mixing and resampling."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from susurrus.audio import SAMPLE_RATE, AudioDecodeError, decode_audio, resample

REPO = Path(__file__).resolve().parents[1]

DATA = REPO.parent / "shared" / "data"
DEV_AUDIO = DATA / "dev" / "audio"


def _dev_wav() -> Path:
    wavs = sorted(DEV_AUDIO.glob("*.wav")) if DEV_AUDIO.is_dir() else []
    if not wavs:
        pytest.skip(f"no dev recordings found under {DEV_AUDIO} (shared speech data absent)")
    preferred = DEV_AUDIO / "jfk_inaugural.wav"
    return preferred if preferred in wavs else wavs[0]


def _sine(freq: float, sr: int, seconds: float, amp: float = 1.0) -> np.ndarray:
    t = np.arange(round(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[np.argmax(spectrum)])


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


# --- resample -------------------------------------------------------------------------


@pytest.mark.parametrize("orig_sr", [44100, 48000, 22050, 8000, 11025])
def test_resample_keeps_sine_frequency_and_amplitude(orig_sr: int) -> None:
    x = _sine(1000.0, orig_sr, 1.0)
    y = resample(x, orig_sr, 16000)
    assert y.dtype == np.float32 and y.ndim == 1
    assert len(y) == 16000
    assert _peak_hz(y, 16000) == pytest.approx(1000.0, abs=1.0)
    inner = y[len(y) // 8 : -len(y) // 8]  # skip the zero-padded edges
    assert _rms(inner) == pytest.approx(1 / np.sqrt(2), rel=0.01)
    # Sample-wise it should match the ideal sine at the new rate.
    ideal = _sine(1000.0, 16000, 1.0)[len(y) // 8 : -len(y) // 8]
    assert np.max(np.abs(inner - ideal)) < 1e-3


def test_resample_upsampling_keeps_sine() -> None:
    y = resample(_sine(440.0, 16000, 0.5, amp=0.5), 16000, 44100)
    assert len(y) == 22050
    assert _peak_hz(y, 44100) == pytest.approx(440.0, abs=2.0)
    assert _rms(y[2000:-2000]) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)


def test_resample_suppresses_frequencies_above_new_nyquist() -> None:
    # 9 kHz is representable at 44.1 kHz but above 16 kHz's Nyquist: it must not alias to 7 kHz.
    y = resample(_sine(9000.0, 44100, 0.5), 44100, 16000)
    assert _rms(y[500:-500]) < 0.01


@pytest.mark.parametrize(
    ("orig_sr", "new_sr"), [(44100, 16000), (48000, 16000), (8000, 16000), (16000, 44100), (3, 2)]
)

@pytest.mark.parametrize("n", [0, 1, 2, 7, 441, 1001])
def test_resample_output_length_is_ceiling(orig_sr: int, new_sr: int, n: int) -> None:
    y = resample(np.ones(n, dtype=np.float32), orig_sr, new_sr)
    assert y.shape == (-(-n * new_sr // orig_sr),)


def test_resample_identity_and_dc_gain() -> None:
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(resample(x, 16000, 16000), x)
    y = resample(np.full(4410, 0.25, dtype=np.float32), 44100, 16000)
    np.testing.assert_allclose(y[100:-100], 0.25, atol=1e-5)


def test_resample_batches_over_leading_axes() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 900)).astype(np.float32)
    y = resample(x, 44100, 16000)
    assert y.shape == (2, 3, 327)
    np.testing.assert_allclose(y[1, 2], resample(x[1, 2], 44100, 16000), atol=1e-6)


@pytest.mark.parametrize(("orig_sr", "new_sr"), [(0, 16000), (16000, 0), (-8000, 16000)])
def test_resample_rejects_bad_rates(orig_sr: int, new_sr: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        resample(np.zeros(10, dtype=np.float32), orig_sr, new_sr)


def test_resample_ten_minutes_of_48k_is_fast() -> None:
    x = np.tile(np.random.default_rng(2).standard_normal(48000, dtype=np.float32), 600)
    t0 = time.perf_counter()
    y = resample(x, 48000, 16000)
    elapsed = time.perf_counter() - t0
    assert len(y) == 16000 * 600
    assert elapsed < 3.0, f"10 min of 48 kHz audio took {elapsed:.2f} s to resample"


# --- decode_audio: arrays ---------------------------------------------------------------


def test_decode_int16_array_is_scaled() -> None:
    pcm = np.array([0, 16384, -32768, 32767, -16384], dtype=np.int16)
    out = decode_audio(pcm)
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(out, np.array([0, 0.5, -1.0, 32767 / 32768, -0.5], np.float32))


def test_decode_stereo_array_is_downmixed() -> None:
    frames = np.stack([np.full(100, 0.5), np.full(100, -0.1)], axis=1)  # (frames, channels)
    out = decode_audio(frames)
    assert out.shape == (100,) and out.dtype == np.float32
    np.testing.assert_allclose(out, 0.2, atol=1e-7)
    # Integer stereo must not overflow while averaging.
    loud = np.full((50, 2), 32767, dtype=np.int16)
    np.testing.assert_allclose(decode_audio(loud), 32767 / 32768, atol=1e-7)


def test_decode_array_is_not_resampled() -> None:
    x = _sine(300.0, 8000, 0.1)
    np.testing.assert_array_equal(decode_audio(x, sampling_rate=8000), x)
    assert SAMPLE_RATE == 16000


# --- decode_audio: files ----------------------------------------------------------------


def test_decode_real_recording_matches_soundfile() -> None:
    wav = _dev_wav()
    ref, sr = sf.read(wav, dtype="float32")
    assert sr == 16000 and ref.ndim == 1
    out = decode_audio(wav)
    assert out.dtype == np.float32 and out.ndim == 1 and out.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(out, ref)
    assert _rms(out) > 1e-3  # real speech, not silence
    # The same file as a str path, as bytes, and through seekable / non-seekable streams.
    np.testing.assert_array_equal(decode_audio(str(wav)), ref)
    data = wav.read_bytes()
    np.testing.assert_array_equal(decode_audio(data), ref)
    np.testing.assert_array_equal(decode_audio(io.BytesIO(data)), ref)

    class Stream:
        def __init__(self, payload: bytes) -> None:
            self._buf = io.BytesIO(payload)

        def read(self, size: int = -1) -> bytes:
            return self._buf.read(size)

    np.testing.assert_array_equal(decode_audio(Stream(data)), ref)


def test_decode_real_recording_at_other_rate() -> None:
    wav = _dev_wav()
    n = sf.info(wav).frames
    assert len(decode_audio(wav, sampling_rate=8000)) == -(-n // 2)


def test_decode_flac_and_ogg_round_trip(tmp_path: Path) -> None:
    ref, sr = sf.read(_dev_wav(), dtype="int16")
    clip = ref[: 4 * sr]
    flac = tmp_path / "clip.flac"
    ogg = tmp_path / "clip.ogg"
    sf.write(flac, clip, sr, format="FLAC", subtype="PCM_16")
    sf.write(ogg, clip, sr, format="OGG", subtype="VORBIS")
    expected = clip.astype(np.float32) / 32768

    np.testing.assert_allclose(decode_audio(flac), expected, atol=1e-6)

    vorbis = decode_audio(ogg)
    assert abs(len(vorbis) - len(expected)) <= sr // 100
    n = min(len(vorbis), len(expected))
    corr = np.corrcoef(vorbis[:n], expected[:n])[0, 1]
    assert corr > 0.9


def test_decode_44k_stereo_wav_to_16k_mono(tmp_path: Path) -> None:
    sr = 44100
    left = _sine(440.0, sr, 1.5, amp=0.5)
    right = _sine(440.0, sr, 1.5, amp=0.3)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), sr, subtype="FLOAT")
    out = decode_audio(path)
    assert out.shape == (-(-len(left) * 16000 // sr),) == (24000,)
    assert _peak_hz(out, 16000) == pytest.approx(440.0, abs=1.0)
    assert _rms(out[1000:-1000]) == pytest.approx(0.4 / np.sqrt(2), rel=0.01)


def test_decode_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "missing.wav"
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        decode_audio(missing)


def test_decode_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        decode_audio(tmp_path)


def test_decode_garbage_bytes_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    garbage = b"this is not audio at all" * 20
    with pytest.raises(AudioDecodeError):
        decode_audio(garbage)  # with whatever ffmpeg this machine has, if any
    monkeypatch.setenv("PATH", str(tmp_path))  # no ffmpeg reachable
    with pytest.raises(AudioDecodeError, match="ffmpeg") as err:
        decode_audio(garbage)
    assert "<bytes>" in str(err.value) and "soundfile" in str(err.value)
    bad_file = tmp_path / "bad.mp3"
    bad_file.write_bytes(garbage)
    with pytest.raises(AudioDecodeError, match="bad.mp3"):
        decode_audio(bad_file)


def test_decode_rejects_unsupported_types() -> None:
    with pytest.raises(TypeError):
        decode_audio(12345)  # type: ignore[arg-type]


def _fake_ffmpeg(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    script = bin_dir / "ffmpeg"
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(0o755)


@pytest.mark.skipif(os.name != "posix", reason="fake ffmpeg is a shebang script")
def test_decode_falls_back_to_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = (
        "args = sys.argv[1:]\n"
        "assert args[:1] == ['-nostdin'], args\n"
        "assert args[args.index('-i') + 1] == '-', args\n"
        "for flag, value in [('-f', 's16le'), ('-ac', '1'), ('-ar', '8000')]:\n"
        "    assert args[args.index(flag) + 1] == value, args\n"
        "assert args[-1] == '-', args\n"
        "assert sys.stdin.buffer.read() == b'not-a-soundfile-format'\n"
        "import struct\n"
        "sys.stdout.buffer.write(struct.pack('<3h', 0, 16384, -16384))\n"
    )
    _fake_ffmpeg(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    out = decode_audio(b"not-a-soundfile-format", sampling_rate=8000)
    np.testing.assert_array_equal(out, np.array([0.0, 0.5, -0.5], dtype=np.float32))


@pytest.mark.skipif(os.name != "posix", reason="fake ffmpeg is a shebang script")
def test_decode_reports_ffmpeg_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = "sys.stderr.write('Invalid data found when processing input\\n')\nsys.exit(1)"
    _fake_ffmpeg(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(AudioDecodeError, match="Invalid data found"):
        decode_audio(io.BytesIO(b"garbage" * 10))
