"""Speech turns on real speech: how well VAD + the server_vad turn tracker find utterances.

The long-form dev streams (``longform`` manifest, whose ``segments`` give each utterance's
start and end) get a gap of ``--gap`` seconds inserted in the middle of every natural pause
(0.4 or 0.7 s of digital silence in these streams), filled with digital silence, pink noise or
synthetic music at a low level. Silero VAD and :func:`push_turn` then run over each stream as
if live (audio fed in 320 ms pieces, one thread).

Per setting the table gives, over all utterances:

- ``onset``: the fraction whose speech onset (``speech_start_ms`` of the first turn that
  overlaps the utterance) is within ``--tol`` s of the utterance start;
- ``padded``: the same for ``audio_start_ms`` (onset minus the prefix padding, what OpenAI
  reports): expected ~``prefix_padding_ms`` early, so mostly outside a 0.3 s tolerance;
- ``end``: the fraction whose speech end (``speech_end_ms`` of the last overlapping turn) is
  within ``--tol`` s of the utterance end; ``audio_end_ms`` (what OpenAI reports) is by
  definition the speech end plus the silence duration rounded up to a 32 ms frame;
- median signed errors (turn minus reference) of onset and end, in ms;
- ``split``: utterances overlapped by two or more turns; ``merged``: utterances that share a
  turn with another utterance; ``missed``: utterances no turn overlaps; ``false``: turns that
  overlap no utterance (triggered by the gap filler).

A turn overlaps an utterance when their raw speech intervals intersect. ``--reference speech``
narrows each utterance to its audible speech first (leading and trailing 10 ms frames more
than 35 dB below the utterance's loudest are cut): LibriSpeech and LibriVox clips start with
0.3-0.6 s of silence that the manifest's boundaries include.

    python benchmarks/turns.py [--gap 1.5] [--tol 0.3] [--reference segments|speech]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.streaming.vad import (
    FRAME_MS,
    SpeechStarted,
    SpeechStopped,
    TurnConfig,
    TurnState,
    VadState,
    finish_turn,
    load_vad,
    push_turn,
    push_vad,
)

CHUNK = 5120  # 320 ms pieces, as the streaming session's default step


def gap_filler(kind: str):
    if kind == "silence":
        return None
    if kind == "pink-50":
        return lambda n, i: signals.pink_noise(n / 16000, level_dbfs=-50.0, seed=i)
    if kind == "pink-35":
        return lambda n, i: signals.pink_noise(n / 16000, level_dbfs=-35.0, seed=i)
    if kind == "music-35":
        return lambda n, i: signals.music(n / 16000, level_dbfs=-35.0, seed=i)
    raise ValueError(kind)


def trim_to_speech(audio: np.ndarray, segments: list[dict], rel_db: float = -35.0) -> list[dict]:
    """Segments narrowed to their speech: leading and trailing 10 ms frames whose RMS is more
    than ``-rel_db`` dB below the segment's loudest frame are cut (the clips of some corpora
    hold 0.3-0.6 s of silence before the first word)."""
    out = []
    for seg in segments:
        a, b = int(seg["start_s"] * 16000), int(seg["end_s"] * 16000)
        x = audio[a:b][: (b - a) // 160 * 160].reshape(-1, 160)
        rms = np.sqrt(np.mean(np.square(x, dtype=np.float64), axis=1))
        loud = np.nonzero(rms >= rms.max() * 10 ** (rel_db / 20))[0]
        out.append({**seg, "start_s": (a + 160 * loud[0]) / 16000, "end_s": (a + 160 * (loud[-1] + 1)) / 16000})
    return out


def run_vad(vad, audio: np.ndarray) -> tuple[np.ndarray, float]:
    """All frame probabilities of a stream fed in CHUNK pieces; and the CPU seconds it took."""
    state, out = VadState(), []
    t0 = time.process_time()
    for i in range(0, len(audio), CHUNK):
        out.append(push_vad(vad, state, audio[i:i + CHUNK]))
    out.append(push_vad(vad, state, np.zeros(0, dtype=np.float32), final=True))
    return np.concatenate(out), time.process_time() - t0


def turns_of(probs: np.ndarray, config: TurnConfig) -> list[tuple[SpeechStarted, SpeechStopped]]:
    state, events = TurnState(config=config), []
    for i in range(0, len(probs), CHUNK // 512):  # as the session would: a step's frames at a time
        events += push_turn(state, probs[i:i + CHUNK // 512])
    events += finish_turn(state)
    return [(a, b) for a, b in zip(events[::2], events[1::2])]


def score(turns, segments, tol_ms: float) -> dict:
    refs = [(1000 * s["start_s"], 1000 * s["end_s"]) for s in segments]
    spans = [(a.speech_start_ms, b.speech_end_ms) for a, b in turns]
    by_seg = [[j for j, (t0, t1) in enumerate(spans) if t0 < e and t1 > s] for s, e in refs]
    by_turn = [[i for i, (s, e) in enumerate(refs) if t0 < e and t1 > s] for t0, t1 in spans]
    onset_err, padded_err, end_err = [], [], []
    for (s, e), js in zip(refs, by_seg):
        if js:
            onset_err.append(turns[js[0]][0].speech_start_ms - s)
            padded_err.append(turns[js[0]][0].audio_start_ms - s)
            end_err.append(turns[js[-1]][1].speech_end_ms - e)
    n = len(refs)
    return {
        "utterances": n,
        "onset": sum(abs(x) <= tol_ms for x in onset_err) / n,
        "padded": sum(abs(x) <= tol_ms for x in padded_err) / n,
        "end": sum(abs(x) <= tol_ms for x in end_err) / n,
        "onset_med": statistics.median(onset_err) if onset_err else float("nan"),
        "end_med": statistics.median(end_err) if end_err else float("nan"),
        "split": sum(len(js) > 1 for js in by_seg),
        "merged": sum(any(len(by_turn[j]) > 1 for j in js) for js in by_seg),
        "missed": sum(not js for js in by_seg),
        "false": sum(not segs for segs in by_turn),
        "onset_err": onset_err,
        "end_err": end_err,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--gap", type=float, default=1.5, help="seconds inserted between utterances")
    ap.add_argument("--tol", type=float, default=0.3, help="boundary tolerance, seconds")
    ap.add_argument("--fills", default="silence,pink-50,pink-35,music-35")
    ap.add_argument("--reference", choices=["segments", "speech"], default="segments",
                    help="utterance boundaries: the manifest's segments, or those trimmed to their speech by energy")
    args = ap.parse_args()
    torch.set_num_threads(1)
    vad = load_vad(threads=1)
    items = read_manifest(args.data)
    configs = {
        "server_vad 0.5/300/500": TurnConfig(),
        "  + hysteresis 0.35": TurnConfig(end_threshold=0.35),
        "  silence 800 ms": TurnConfig(silence_duration_ms=800),
        "  threshold 0.3": TurnConfig(threshold=0.3),
        "  min speech 96 ms": TurnConfig(min_speech_ms=96),
    }
    cpu = audio_s = 0.0
    print(f"gap {args.gap} s inserted between utterances; tolerance {args.tol} s; frames of {FRAME_MS} ms; "
          f"reference: {args.reference}\n")
    header = (f"{'fill':<10} {'setting':<24} {'utt':>4} {'onset':>6} {'padded':>6} {'end':>6} "
              f"{'onset ms':>8} {'end ms':>7} {'split':>5} {'merged':>6} {'missed':>6} {'false':>5}")
    print(header)
    print("-" * len(header))
    for fill in args.fills.split(","):
        streams = []
        for item in items:
            audio = decode_audio(str(item.audio))
            audio, segs = signals.insert_gaps(audio, item.segments, args.gap, fill=gap_filler(fill))
            probs, t = run_vad(vad, audio)
            cpu += t
            audio_s += len(audio) / 16000
            streams.append((probs, segs if args.reference == "segments" else trim_to_speech(audio, segs)))
        for name, cfg in configs.items():
            tot: dict = {}
            for probs, segs in streams:
                r = score(turns_of(probs, cfg), segs, 1000 * args.tol)
                for k, v in r.items():
                    if isinstance(v, list):
                        tot[k] = tot.get(k, []) + v
                    else:
                        tot[k] = tot.get(k, 0) + (v * r["utterances"] if k in ("onset", "padded", "end") else v)
            n = tot["utterances"]
            print(f"{fill:<10} {name:<24} {n:>4} {tot['onset'] / n:>6.0%} {tot['padded'] / n:>6.0%} "
                  f"{tot['end'] / n:>6.0%} {statistics.median(tot['onset_err']):>8.0f} "
                  f"{statistics.median(tot['end_err']):>7.0f} {tot['split']:>5} {tot['merged']:>6} "
                  f"{tot['missed']:>6} {tot['false']:>5}")
    print(f"\nVAD cost: {cpu / audio_s:.4f} core-s per audio-s ({cpu:.1f} s CPU for {audio_s / 60:.1f} min, "
          f"1 thread, {1000 * cpu / (audio_s * 1000 / FRAME_MS):.3f} ms per 32 ms frame)")


if __name__ == "__main__":
    main()
