"""Same audio, same text: a stream's output does not depend on how the audio is cut into ``feed`` calls.

Each stream is fed in pieces of 0.1 s, 1.0 s and of random sizes (1 sample to 2 s, a fixed
seed), then finished, through one default stream (``medium``: VAD gating, idling and flushes,
re-anchoring, hallucination guard), one thread, as fast as it computes. Per stream and piece
pattern: committed words, whether the committed text, the words with their times
(start, end, emitted_at, probability) and the whole event sequence (interim texts and their
audio times included) equal those of the 0.1 s pieces, WER against the manifest text, and
the wall time.

Streams (``--streams``, comma-separated):

- ``concat``: ``longform/dev_all_english_concat`` (5.5 min, several speakers);
- ``ljspeech``: ``longform/dev_ljspeech_LJ001-0001_to_0032`` (3.9 min, one speaker);
- ``osr``: ``hard/osr_us_000_0034_8k`` (35 s, 10 read sentences with 1-2 s pauses,
  telephone-band), also with ``turns`` (server_vad turn detection: a flush per turn);
- ``fra``: ``multi/readalongs_ej-fra`` (34 s of French with pauses; meant for a
  multilingual model without ``--language``: the language is detected per window).

    python benchmarks/diagnostics/piece_sizes.py [--model tiny.en] [--language en] [--lookahead-ms 1000]
        [--streams concat,ljspeech,osr,osr-turns] [--patterns 0.1,1.0,random]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import astuple

import numpy as np
import torch

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.data import SHARED_DATA, Item, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.vad import TurnConfig

STREAMS = {  # name: (manifest folder, item id, turns)
    "concat": ("longform", "dev_all_english_concat", False),
    "ljspeech": ("longform", "dev_ljspeech_LJ001-0001_to_0032", False),
    "osr": ("hard", "osr_us_000_0034_8k", False),
    "osr-turns": ("hard", "osr_us_000_0034_8k", True),
    "fra": ("multi", "readalongs_ej-fra", False),
}


def pieces(n: int, pattern: str, seed: int = 0) -> list[tuple[int, int]]:
    """``(start, stop)`` of the pieces that cut ``n`` samples: ``pattern`` is seconds per piece
    or ``random`` (1 sample to 2 s)."""
    out, i = [], 0
    rng = np.random.default_rng(seed)
    while i < n:
        k = int(rng.integers(1, 32001)) if pattern == "random" else round(float(pattern) * 16000)
        out.append((i, min(n, i + k)))
        i += k
    return out


def _event_key(event) -> tuple:
    return (type(event).__name__, *astuple(event))  # words included, as tuples


def run_stream(model, audio: np.ndarray, pattern: str, turns: bool, language: str | None,
               lookahead_ms: int | None = None) -> tuple[list, list, float]:
    stream = model.stream("medium", language=language, lookahead_ms=lookahead_ms,
                          turns=TurnConfig() if turns else None)
    t0 = time.perf_counter()
    events = []
    for a, b in pieces(len(audio), pattern):
        events.extend(stream.feed(audio[a:b]))
    events.extend(stream.finish())
    return stream.words, [_event_key(e) for e in events], time.perf_counter() - t0


def find_item(folder: str, item_id: str) -> Item:
    for item in read_manifest(SHARED_DATA / folder):
        if item.id == item_id:
            return item
    raise SystemExit(f"{item_id} not in {SHARED_DATA / folder}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--language", default=None, help="fixed language (multilingual models)")
    ap.add_argument("--lookahead-ms", type=int, default=None,
                    help="encoder look-ahead (the README advises 1000 for base)")
    ap.add_argument("--streams", default="concat,ljspeech,osr,osr-turns")
    ap.add_argument("--patterns", default="0.1,1.0,random")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    patterns = args.patterns.split(",")
    fixed = args.language or ("detected per window" if model.is_multilingual else "en")
    lookahead = f", lookahead {args.lookahead_ms} ms" if args.lookahead_ms else ""
    print(f"model {args.model}, language {fixed}{lookahead}; compared with {patterns[0]} s pieces\n")
    print("| stream | pieces | words | same text | same words and times | same events | WER % | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.streams.split(","):
        folder, item_id, turns = STREAMS[name]
        item = find_item(folder, item_id)
        audio = decode_audio(item.audio)
        first = None
        for pattern in patterns:
            words, events, wall = run_stream(model, audio, pattern, turns, args.language, args.lookahead_ms)
            text = "".join(w.word for w in words)
            if first is None:
                first = (text, words, events)
            language = args.language or item.language
            unit = "char" if language in ("zh", "ja") else "word"
            wer = corpus_error_rate([(item.text, text)], language, unit)
            same = ["yes" if x == y else "**no**" for x, y in zip((text, words, events), first)]
            label = f"{pattern} s" if pattern != "random" else "random"
            print(f"| {name} | {label} | {len(words)} | {same[0]} | {same[1]} | {same[2]} | {wer:.2f} | {wall:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
