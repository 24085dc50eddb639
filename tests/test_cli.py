"""The command line as a newcomer meets it: bad arguments get one line and exit 2 before any work,
options a model cannot honour are refused, finished work is never lost to an output error, raw
PCM of any rate and channel count streams, and Ctrl+C ends a live stream with its outputs written."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import default_sigint

from susurrus.audio.io import decode_audio
from susurrus.cli.main import main
from susurrus.evaluation.metrics import normalize

SHORT = "ljspeech_LJ001-0008"  # 1.8 s: "has never been surpassed."
JFK = "jfk_inaugural"  # 11 s, ends "... ask what you can do for your country."


def _fails(capsys, argv: list[str]) -> str:
    """``susurrus ARGV`` exits 2 with one line on stderr (no traceback); returns that line."""
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse's own refusals
        status = exit.code
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert "Traceback" not in err
    return err.splitlines()[-1]


@pytest.fixture
def junk(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("hello\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "existing").write_text("a file where the output folder should be\n")
    return tmp_path


def test_bad_arguments_fail_with_one_line_before_any_work(capsys, junk, dev_item, ffmpeg_or_not):
    """The same line and exit code with ffmpeg installed and without it."""
    wav = str(dev_item(SHORT).audio)
    cases = [
        (["stream", str(junk / "empty.wav")], "the file is empty"),
        (["stream", str(junk / "text.wav")], "does not look like audio"),
        (["stream", str(junk / "folder")], "is a folder"),
        (["stream", wav, "--chunk-ms", "7"], "--chunk-ms: must be within 20..5000 ms, not 7"),
        (["stream", wav, "--chunk-ms", "0"], "--chunk-ms"),
        (["stream", wav, "--chunk-ms", "-5"], "--chunk-ms"),
        (["stream", wav, "--lookahead-ms", "-5"], "--lookahead-ms: must be within 0..5000 ms"),
        (["stream", wav, "--language", "xx"], "unknown language 'xx'"),
        (["stream", wav, "--turns", "--silence-ms", "0"], "--silence-ms: must be within 32..10000"),
        (["stream", wav, "-f", "txt", "-o", str(junk / "existing")], "exists and is not a folder"),
        (["stream", wav, "--rate", "48000"], "describe raw PCM on stdin"),
        (["transcribe", wav, "-o", str(junk / "existing")], "exists and is not a folder"),
        (["transcribe", wav, "--beam-size", "0"], "--beam-size: must be within 1..100"),
        (["transcribe", wav, "--temperature", "-1"], "--temperature: must be at least 0"),
        (["transcribe", str(junk / "folder")], "is a folder"),
        (["bench", str(junk / "text.wav")], "does not look like audio"),
        (["client", "http://127.0.0.1:9/v1/realtime", wav], "is an HTTP URL"),
        (["client", "ws://127.0.0.1:9/v1/realtime", str(junk / "text.wav")], "does not look like audio"),
        (["serve", "--threads", "0"], "--threads: must be at least 1"),
    ]
    for argv, message in cases:
        assert message in _fails(capsys, argv), argv


def test_options_an_english_only_model_cannot_honour_are_refused(capsys, dev_item):
    wav = str(dev_item(SHORT).audio)
    assert "English-only: it cannot transcribe German (--language de)" in _fails(
        capsys, ["stream", wav, "--language", "German"])  # a name, as Whisper accepts them
    assert "--task translate needs a multilingual model" in _fails(capsys, ["transcribe", wav, "--task", "translate"])


def test_a_language_name_is_accepted_like_its_code():
    from susurrus.cli.main import build_parser

    parser = build_parser()
    for given, code in (("German", "de"), ("de", "de"), ("Mandarin", "zh"), ("ENGLISH", "en"), ("castilian", "es")):
        assert parser.parse_args(["transcribe", "x.wav", "--language", given]).language == code
        assert parser.parse_args(["stream", "x.wav", "--language", given]).language == code


@pytest.mark.slow
def test_a_result_that_cannot_be_written_is_printed_instead(capsys, dev_item, tmp_path):
    """The output folder is fine but the file's place is taken (by a folder): the transcript is
    printed on stdout with the reason, not lost; the status says something went wrong."""
    wav = dev_item(SHORT).audio
    (tmp_path / f"{wav.stem}.txt").mkdir()
    assert main(["transcribe", str(wav), "--beam-size", "1", "--quiet", "-o", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "cannot write" in out.err and "the result follows on stdout" in out.err
    assert normalize(out.out) == normalize("has never been surpassed.")


@pytest.mark.slow
def test_several_files_each_get_a_header(capsys, dev_item, tmp_path):
    a, b = dev_item(SHORT).audio, dev_item("ljspeech_LJ001-0002").audio
    assert main(["transcribe", str(a), str(b), "--beam-size", "1", "-o", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"==> {a} <==" and f"==> {b} <==" in lines[2:]


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(data)))


@pytest.mark.slow
def test_raw_pcm_of_any_rate_and_channels_streams_from_stdin(capsys, monkeypatch, dev_item, tmp_path):
    from susurrus.audio.io import resample

    audio = decode_audio(dev_item(SHORT).audio)
    stereo = np.stack([resample(audio, 16000, 48000), np.zeros(len(audio) * 3, np.float32)], axis=1)
    _stdin(monkeypatch, stereo.astype("<f4").tobytes())
    assert main(["stream", "-", "--pcm-format", "f32le", "--rate", "48000", "--channels", "2", "--quiet",
                 "-f", "txt", "-o", str(tmp_path)]) == 0
    assert normalize((tmp_path / "stdin.txt").read_text()) == normalize("has never been surpassed.")
    assert "warning" not in capsys.readouterr().err


@pytest.mark.slow
def test_input_that_cannot_be_what_was_declared_is_warned_about(capsys, monkeypatch, dev_item, tmp_path):
    wav = dev_item(SHORT).audio
    _stdin(monkeypatch, wav.read_bytes())  # a WAV file piped in, declared as 8 kHz raw PCM
    assert main(["stream", "-", "--rate", "8000", "--quiet", "-f", "txt", "-o", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "standard input is a WAV file of s16le, 16000 Hz, 1 channel, not the declared" in err
    assert normalize((tmp_path / "stdin.txt").read_text()) == normalize("has never been surpassed.")
    pcm = (decode_audio(wav) * 32767).astype("<i2").tobytes()
    _stdin(monkeypatch, pcm + b"\x00")  # an odd byte count: not mono 16-bit after all
    assert main(["stream", "-", "--quiet"]) == 0
    assert "the input ended 1 bytes into a 2-byte frame" in capsys.readouterr().err
    _stdin(monkeypatch, pcm)  # 16-bit samples declared as float32
    assert main(["stream", "-", "--quiet", "--pcm-format", "f32le"]) == 0
    assert "does not look like float32 PCM" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_ends_a_live_stream_and_writes_what_was_heard(dev_item, tmp_path):
    """``arecord | susurrus stream - -f txt``, then Ctrl+C: the stream is finished (the words still
    pending are committed), the file written, exit 0. stdin stays open, as a microphone's does."""
    # JFK from the pause after "ask not" (4.53-4.92 s): two phrases, the second read live, then Ctrl+C
    pcm = (decode_audio(dev_item(JFK).audio)[int(4.7 * 16000):] * 32767).astype("<i2").tobytes()
    proc = subprocess.Popen([sys.executable, "-m", "susurrus", "stream", "-", "-f", "txt", "-o", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=default_sigint)
    watchdog = threading.Timer(300, proc.kill)  # a hang fails the test instead of blocking the run
    watchdog.start()
    try:
        proc.stdin.write(pcm)
        proc.stdin.flush()
        printed = b""
        while b"ask what you" not in printed.lower():  # committed live: the audio has been read this far
            chunk = proc.stdout.read1(4096)
            assert chunk, proc.stderr.read().decode()
            printed += chunk
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"wrote" in err
    written = (tmp_path / "stdin.txt").read_text()
    assert normalize(written).startswith(normalize(printed.decode()))
    assert written.strip().endswith("your country.")  # the words pending at Ctrl+C, committed by finish


def test_help_is_fast_to_start_and_says_what_it_means():
    """``--help``, ``--version`` and argument errors import no PyTorch; ``serve --help`` says one
    thing about threads; every option has help."""
    code = ("import sys; from susurrus.cli.main import build_parser; p = build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "sub = p._subparsers._group_actions[0].choices; "
            "print('\\n'.join(a.option_strings[0] for c in sub.values() for a in c._actions "
            "if a.option_strings and not a.help))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
    version = subprocess.run([sys.executable, "-m", "susurrus", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.stdout.strip() == "susurrus 0.1.0"
    serve = subprocess.run([sys.executable, "-m", "susurrus", "serve", "--help"], capture_output=True, text=True,
                           timeout=60).stdout
    assert "PyTorch's choice" not in serve and "--log-level" in serve and "how much the server logs" in serve


def test_serve_on_a_busy_port_fails_before_announcing_itself():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "susurrus", "serve", "--port", str(port)], capture_output=True,
                             text=True, timeout=60)
    assert out.returncode == 2
    assert "the port is in use" in out.stderr and "demo at" not in out.stderr and "Traceback" not in out.stderr


def test_threads_default_to_one(dev_item):
    from susurrus.cli.main import build_parser

    parser = build_parser()
    wav = str(dev_item(SHORT).audio)
    for argv in (["transcribe", wav], ["stream", wav], ["serve"], ["bench", wav]):
        assert parser.parse_args(argv).threads == 1, argv
    assert Path(wav).exists() and sf.info(wav).samplerate == 16000
