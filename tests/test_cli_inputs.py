"""What a user gives the command line is neither lost nor refused late: same-named inputs get
distinct outputs, Ctrl+C in ``transcribe`` keeps what was decoded and says where it stopped, and
every command refuses a missing or non-audio input before PyTorch is imported, with exit 2 and
the same ``susurrus CMD: error:`` line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import FFMPEG, default_sigint

from susurrus.cli.main import main
from susurrus.cli.outputs import output_names

SHORT = "ljspeech_LJ001-0008"  # 1.8 s: "has never been surpassed."
OTHER = "ljspeech_LJ001-0002"  # 1.9 s: "in being comparatively modern."
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def test_output_names_tell_same_named_inputs_apart(tmp_path):
    for d in ("d1", "d2", "x/d1"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "a.wav").write_bytes(b"RIFF")
    (tmp_path / "d2" / "a.flac").write_bytes(b"fLaC")
    (tmp_path / "b.mp3").write_bytes(b"ID3")
    (tmp_path / "b.flac").write_bytes(b"fLaC")
    t = str(tmp_path)
    assert output_names([f"{t}/d1/a.wav", f"{t}/b.mp3"]) == {f"{t}/d1/a.wav": Path("a"), f"{t}/b.mp3": Path("b")}
    assert output_names([f"{t}/d1/a.wav", f"{t}/d2/a.wav"]) == {f"{t}/d1/a.wav": Path("d1/a"),
                                                                f"{t}/d2/a.wav": Path("d2/a")}
    assert output_names([f"{t}/b.mp3", f"{t}/b.flac"]) == {f"{t}/b.mp3": Path("b.mp3"), f"{t}/b.flac": Path("b.flac")}
    names = output_names([f"{t}/d1/a.wav", f"{t}/x/d1/a.wav", f"{t}/d2/a.wav", f"{t}/d2/a.flac"])
    assert len(set(names.values())) == 4  # the folders they differ by, and the extension where needed
    assert names[f"{t}/x/d1/a.wav"] == Path("x/d1/a.wav") and names[f"{t}/d2/a.flac"].name == "a.flac"
    same = output_names([f"{t}/d1/a.wav", f"{t}/d1/../d1/a.wav"])  # one file given twice: once
    assert list(same) == [f"{t}/d1/a.wav"]


@pytest.mark.slow
def test_same_named_inputs_do_not_overwrite_each_other(capsys, dev_item, tmp_path):
    for d, item in (("d1", SHORT), ("d2", OTHER)):
        (tmp_path / d).mkdir()
        shutil.copy(dev_item(item).audio, tmp_path / d / "a.wav")
    out = tmp_path / "out"
    assert main(["transcribe", str(tmp_path / "d1/a.wav"), str(tmp_path / "d2/a.wav"), "-o", str(out),
                 "--beam-size", "1", "--quiet"]) == 0
    assert "surpassed" in (out / "d1" / "a.txt").read_text()
    assert "modern" in (out / "d2" / "a.txt").read_text()
    assert not (out / "a.txt").exists()


@pytest.mark.slow
def test_ctrl_c_in_transcribe_writes_what_was_decoded_and_says_where(longform_items, tmp_path):
    """SIGINT once a few segments of the 5.5-minute long-form stream are printed: exit 130, the srt
    holds every segment printed so far, and stderr names the file and the time reached."""
    item = next(i for i in longform_items if i.duration_s > 300)
    proc = subprocess.Popen([sys.executable, "-m", "susurrus", "transcribe", str(item.audio), "-f", "srt",
                             "-o", str(tmp_path), "--beam-size", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                            preexec_fn=default_sigint)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        lines: list[bytes] = []
        while len(lines) < 3:  # three segments decoded and printed
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        # the rest through the same reader: readline may have read lines ahead into its buffer,
        # which communicate(), reading the pipe itself, would not see
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        watchdog.cancel()
        proc.kill()
    printed = [line.decode() for line in lines] + out.decode().splitlines(keepends=True)
    err_text = err.decode()
    assert proc.returncode == 130, err_text
    assert "Traceback" not in err_text
    srt = (tmp_path / f"{item.audio.stem}.srt").read_text()
    cues = [block for block in srt.strip().split("\n\n") if block]
    assert len(cues) == len([p for p in printed if p.startswith("[")]) >= 3
    last_end = printed[-1].split("-->")[1].split("]")[0].strip()
    assert f"interrupted at {last_end} of {item.audio}" in err_text
    assert str(tmp_path / f"{item.audio.stem}.srt") in err_text


@pytest.mark.slow
@pytest.mark.parametrize("command", [["transcribe"], ["stream"], ["bench"], ["client", "ws://127.0.0.1:9/v1/realtime"]])
def test_every_command_refuses_a_bad_input_before_pytorch(command, tmp_path, ffmpeg_or_not):
    """A missing file, a folder, an unreadable file and a file that is no audio: exit 2, one
    ``susurrus CMD: error:`` line, the same with ffmpeg installed and without it, and PyTorch
    never imported (``-X importtime`` lists every module the process imported)."""
    (tmp_path / "notes.wav").write_text("not audio\n")
    (tmp_path / "locked.wav").write_bytes(b"RIFF\0\0\0\0WAVE")
    (tmp_path / "locked.wav").chmod(0)
    cases = {"missing.wav": "no such file", "notes.wav": "does not look like audio", ".": "is a folder"}
    if os.geteuid() != 0:  # root reads any file
        cases["locked.wav"] = "cannot read it"
    for name, message in cases.items():
        if name == "." and command == ["bench"]:
            continue  # bench reads a folder: its audio files
        path = str(tmp_path / name) if name != "." else str(tmp_path)
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "susurrus", *command, path],
                              capture_output=True, text=True, env={**ENV, "PATH": os.environ["PATH"]}, timeout=120)
        imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
        said = [line for line in proc.stderr.splitlines() if "|" not in line]
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(said) == 1 and said[0].startswith(f"susurrus {command[0]}: error: {path}: {message}"), said
        assert "susurrus.cli.main" in imported and "torch" not in imported, (command, name)


def test_a_file_with_no_known_header_is_read_where_ffmpeg_reads_it(tmp_path, ffmpeg_or_not):
    """AC-3 audio (no header :func:`~susurrus.audio.sniff.sniff` knows): taken by the input check
    where ffmpeg is installed and reads it, refused in the words of a file that is no audio where
    it is not; a text file is refused in those words either way."""
    from susurrus.audio.sniff import sniff
    from susurrus.cli.args import NOT_AUDIO, UsageError, check_input_file

    if FFMPEG is None:
        pytest.skip("no ffmpeg on this machine to make an AC-3 file with")
    ac3, text = tmp_path / "tone.ac3", tmp_path / "notes.wav"
    text.write_text("not audio\n")
    subprocess.run([FFMPEG, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "sine=frequency=440:duration=1",
                    "-c:a", "ac3", str(ac3)], check=True, timeout=60)
    assert sniff(ac3.read_bytes()[:16]) is None
    if ffmpeg_or_not:
        check_input_file(str(ac3))
    else:
        with pytest.raises(UsageError, match="does not look like audio"):
            check_input_file(str(ac3))
    with pytest.raises(UsageError) as refused:
        check_input_file(str(text))
    assert str(refused.value) == f"{text}: {NOT_AUDIO}"
