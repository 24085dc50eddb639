"""Long pauses in long-form speech: accuracy unchanged, compute follows speech, not wall time.

Each long-form dev stream (the ``longform`` manifest, whose ``segments`` give every utterance's
start and end) is streamed through one default stream (VAD gating and hallucination guard on),
in ``chunk_ms`` pieces as fast as it computes, one thread, in these variants:

- ``unmodified``: as recorded (pauses of 0.4-0.7 s between utterances);
- ``pauses 5 s``: every pause stretched to 5 s (``signals.stretch_pauses``; the added audio
  loops the pause's own background, here digital silence);
- ``gaps 30 s silence``: 30 s of digital silence inserted in the middle of every pause
  (``signals.insert_gaps``);
- ``gaps 30 s pink -50``: the same gaps filled with pink noise at -50 dBFS RMS (a quiet room).

Per stream and variant: WER against the manifest text (target: within 0.5 points of the
unmodified stream), audio and speech seconds (speech: the sum of the segments' durations, the
same in every variant), compute in core-seconds (``time.process_time``, VAD included), compute
per audio-second and per speech-second (which should stay about the same in every variant:
compute scales with speech), compute steps run and words the guard dropped. ``VAD alone``:
Silero VAD run on its own over the same audio in the same pieces (its share of the stream's
compute); ``rest``: the stream's compute less that, per speech-second (mel front end, encoder,
decoder, flushes).

Below the table, for each variant, the utterances whose words differ from the unmodified
stream's (words assigned to the utterance their middle falls in, or the nearest one), so that
words lost or gained at pause edges can be read.

    python benchmarks/pauses.py [--variants unmodified,pauses-5,gaps-30-silence,gaps-30-pink]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate, error_counts
from susurrus.streaming.vad import VadState, load_vad, push_vad

Variant = Callable[[np.ndarray, list[dict]], tuple[np.ndarray, list[dict]]]
VARIANTS: dict[str, tuple[str, Variant]] = {
    "unmodified": ("unmodified", lambda a, s: (a, s)),
    "pauses-5": ("pauses 5 s", lambda a, s: signals.stretch_pauses(a, s, 5.0)),
    "gaps-30-silence": ("gaps 30 s silence", lambda a, s: signals.insert_gaps(a, s, 30.0)),
    "gaps-30-pink": ("gaps 30 s pink -50", lambda a, s: signals.insert_gaps(
        a, s, 30.0, fill=lambda n, i: signals.pink_noise(n / 16000, level_dbfs=-50.0, seed=i))),
}


@dataclass
class Result:
    audio_s: float
    speech_s: float
    cpu_s: float
    vad_s: float  # of which the VAD alone (measured on its own over the same audio)
    steps: int
    dropped: int
    text: str
    per_utterance: list[str]  # hypothesis words assigned to each utterance


def assign(words, segments: list[dict]) -> list[str]:
    """Committed words per utterance: the one whose span holds the word's middle, or the nearest."""
    out = [""] * len(segments)
    for w in words:
        mid = (w.start + w.end) / 2
        k = min(range(len(segments)), key=lambda i: max(segments[i]["start_s"] - mid, mid - segments[i]["end_s"], 0))
        out[k] += w.word
    return out


def vad_cost(vad, audio: np.ndarray, piece: int) -> float:
    """CPU seconds of Silero VAD alone over ``audio`` fed in ``piece``-sample pieces."""
    state = VadState()
    t0 = time.process_time()
    for i in range(0, len(audio), piece):
        push_vad(vad, state, audio[i:i + piece])
    push_vad(vad, state, np.zeros(0, dtype=np.float32), final=True)
    return time.process_time() - t0


def run(model, vad, audio: np.ndarray, segments: list[dict], label: str) -> Result:
    stream = model.stream()
    piece = stream.config.chunk_ms * 16
    bar = tqdm(total=round(len(audio) / 16000), desc=label, unit="s audio", file=sys.stderr, leave=False)
    t0 = time.process_time()
    for i in range(0, len(audio), piece):
        stream.feed(audio[i:i + piece])
        bar.update(len(audio[i:i + piece]) / 16000)
    stream.finish()
    cpu = time.process_time() - t0
    bar.close()
    speech_s = sum(s["end_s"] - s["start_s"] for s in segments)
    return Result(len(audio) / 16000, speech_s, cpu, vad_cost(vad, audio, piece), len(stream.stats),
                  len(stream.dropped), stream.text, assign(stream.words, segments))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    vad = load_vad(threads=1)
    items = read_manifest(args.data)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{args.model} at {commit}, default stream, 1 thread, chunk-size pieces as fast as it computes\n")
    rows, diffs = [], []
    for item in items:
        audio0 = decode_audio(str(item.audio))
        base: Result | None = None
        for key in args.variants.split(","):
            label, make = VARIANTS[key]
            audio, segs = make(audio0, item.segments)
            r = run(model, vad, audio, segs, f"{item.id[:24]} {label}")
            wer = corpus_error_rate([(item.text, r.text)])
            if key == "unmodified":
                base = r
            rows.append((item.id, label, wer, r))
            print(f"{item.id} {label}: WER {wer:.2f} % cpu {r.cpu_s:.1f} s", file=sys.stderr)
            if base is not None and r is not base:
                for seg, a, b in zip(segs, base.per_utterance, r.per_utterance):
                    if a.split() != b.split():
                        ea = error_counts(seg["text"], a)[0]
                        eb = error_counts(seg["text"], b)[0]
                        diffs.append((item.id, label, seg, ea, eb, a.strip(), b.strip()))
    base_wer = {item_id: wer for item_id, label, wer, _ in rows if label == "unmodified"}
    print("| stream | variant | WER % | vs unmodified | audio s | speech s | compute core-s | core-s / audio-s "
          "| core-s / speech-s | VAD alone core-s | rest core-s / speech-s | steps | dropped words |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for item_id, label, wer, r in rows:
        delta = f"{wer - base_wer[item_id]:+.2f}" if item_id in base_wer else ""
        print(f"| {item_id} | {label} | {wer:.2f} | {delta} | {r.audio_s:.0f} | {r.speech_s:.0f} | {r.cpu_s:.1f} "
              f"| {r.cpu_s / r.audio_s:.4f} | {r.cpu_s / r.speech_s:.4f} | {r.vad_s:.1f} "
              f"| {(r.cpu_s - r.vad_s) / r.speech_s:.4f} | {r.steps} | {r.dropped} |")
    if diffs:
        print("\nUtterances whose words differ from the unmodified stream (errors against the utterance's "
              "reference: unmodified -> variant):\n")
        print("| stream | variant | utterance | errors | unmodified | variant |\n|---|---|---|---|---|---|")
        for item_id, label, seg, ea, eb, a, b in diffs:
            print(f"| {item_id} | {label} | {seg.get('id', '')} ({seg['start_s']:.1f}-{seg['end_s']:.1f} s) "
                  f"| {ea} -> {eb} | {a} | {b} |")


if __name__ == "__main__":
    main()
