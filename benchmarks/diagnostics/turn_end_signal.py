"""How well the text tells an utterance's end from a pause inside it: the signal behind
``semantic_turns``.

On the long-form dev streams with ``--gap`` seconds of silence inserted between utterances, the
stream runs with turn detection that never ends a turn inside a pause we look at (1000 ms of
silence), and at each pause of an open turn, ``--probe-ms`` into it, reads what the semantic rule
reads (``StreamSession._peek_end``: the turn decoded as if the audio ended there, and the
probability of its sentence end). Each pause is labelled by the manifest's segments: an utterance
end (a segment ends within 0.7 s of the speech end) or a pause inside an utterance; its length
comes from the VAD. Reports the ROC AUC of the probability (utterance ends against inner pauses
long enough to matter, >= 250 ms) and, per threshold, how many utterance ends would end sooner
and how many inner pauses of >= 350 ms (which a 350 ms silence would then split) would too.

    python benchmarks/diagnostics/turn_end_signal.py [--gap 1.5] [--probe-ms 192]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.streaming.vad import FRAME_MS, TurnConfig


def pauses(model, audio: np.ndarray, segments: list[dict], probe_ms: int, label: str) -> list[dict]:
    stream = model.stream(turns=TurnConfig(silence_duration_ms=1000))
    ts, vs = stream.turn_state, stream.vad_state
    found: list[dict] = []
    open_: list[dict] = []
    probed = -1
    ends = [1000 * s["end_s"] for s in segments]
    for i in tqdm(range(0, len(audio), 1600), desc=label, file=sys.stderr, leave=False):
        stream.feed(audio[i:i + 1600])
        for p in list(open_):  # pause lengths, once speech resumes (or 3 s pass)
            f = p["end_ms"] // FRAME_MS
            speech = np.flatnonzero(vs.probs[max(0, f - vs.probs_start):] >= 0.5)
            if len(speech) or vs.frames_done - f > 100:
                p["pause_ms"] = int(speech[0]) * FRAME_MS if len(speech) else 10**5
                open_.remove(p)
        quiet = (ts.frames_seen - 1 - ts.last_speech_frame) * FRAME_MS
        if ts.in_speech and ts.last_speech_frame != probed and quiet >= probe_ms and stream.language:
            probed = ts.last_speech_frame
            text, probability = stream._peek_end()
            end_ms = (probed + 1) * FRAME_MS
            p = {"text": text, "p": probability, "end_ms": end_ms,
                 "utterance_end": any(abs(e - end_ms) < 700 for e in ends)}
            found.append(p)
            open_.append(p)
    stream.finish()
    return [p for p in found if "pause_ms" in p]


def auc(pos: list[float], neg: list[float]) -> float:
    return sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / max(1, len(pos) * len(neg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--gap", type=float, default=1.5)
    ap.add_argument("--probe-ms", type=int, default=192)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    found: list[dict] = []
    for item in read_manifest(args.data):
        audio, segs = signals.insert_gaps(decode_audio(str(item.audio)), item.segments, args.gap)
        found += pauses(model, audio, segs, args.probe_ms, item.id[:24])
    ends = [p for p in found if p["utterance_end"]]
    inner = [p for p in found if not p["utterance_end"] and p["pause_ms"] >= 250]
    print(f"{args.model}, gaps {args.gap:g} s, read {args.probe_ms} ms into each pause: {len(found)} pauses, "
          f"{len(ends)} utterance ends, {len(inner)} inner pauses >= 250 ms; "
          f"ROC AUC of the sentence-end probability: {auc([p['p'] for p in ends], [p['p'] for p in inner]):.2f}\n")
    print("| threshold | utterance ends that end sooner | inner pauses >= 350 ms that would split |")
    print("|---|---|---|")
    long_inner = [p for p in inner if p["pause_ms"] >= 350]
    for thr in (0.5, 0.8, 0.9, 0.95, 0.97):
        print(f"| {thr} | {sum(p['p'] >= thr for p in ends)} / {len(ends)} "
              f"| {sum(p['p'] >= thr for p in long_inner)} / {len(long_inner)} |")


if __name__ == "__main__":
    main()
