"""How well can any reader that commits the opening words when the stream does read them?

The bench's opening measure (susurrus/evaluation/edges.py) compares the stream's first three
words with offline's, and offline hears the whole item before its first word. A stream commits
its opening ~1 s after it is said (the latency it is set to), and committed text is final. This
script asks what offline Whisper itself reads as the item's first three words when it is given
only the audio the stream had when it committed its third word (the moment its opening was
final), and that audio plus ``--extra`` seconds: a reader with the stream's latency but every
other advantage of offline (the whole prefix, every frame hearing every other, timestamps,
the fallback). Its distance from offline's full reading, against the stream's own, says how
much of the stream's opening gap is the latency it commits at and how much is the engine.

Per extra: the opening WER against offline's full reading (errors touching offline's first three
words, items with an error) and against the reference, over the same items as the stream's.

    python benchmarks/diagnostics/opening_heard_so_far.py ../shared/data/hard ../shared/data/dev \
        [--latency medium] [--extra 0 0.5 1 2] [--offline-cache /tmp/off.json] [--shard 0/2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.alignment import normalized_words
from susurrus.evaluation.bench import stream_item
from susurrus.evaluation.data import read_items
from susurrus.evaluation.edges import OPENING_WORDS, opening_errors
from susurrus.evaluation.reference import cached_offline, load_offline_cache, offline_reference
from susurrus.streaming.config import stream_config
from susurrus.streaming.session import silence_cross_kv
from susurrus.streaming.vad import load_vad

SR = 16000


def opening_time(session) -> float | None:
    """Audio seconds fed when the stream committed the last of its first three words (None when
    it committed none)."""
    tokens, owner = normalized_words(session.words)
    if not tokens:
        return None
    return session.words[owner[min(OPENING_WORDS, len(tokens)) - 1]].emitted_at


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="manifests or folders holding one (labelled items only)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--latency", default="medium", help="preset (low/medium/high)")
    ap.add_argument("--extra", nargs="+", type=float, default=[0.0, 0.5, 1.0, 2.0],
                    help="seconds of audio past the stream's opening commit given to offline")
    ap.add_argument("--offline-cache", help="the bench's offline cache (full items), read only")
    ap.add_argument("--shard", default="0/1", help="k/n: every n-th item from the k-th (to run in parallel)")
    ap.add_argument("--json", help="per item: texts, the opening's commit time, offline's readings")
    args = ap.parse_args()
    torch.set_num_threads(1)
    k, n = map(int, args.shard.split("/"))
    model = susurrus.load_model(args.model)
    config = stream_config(args.latency)
    vad, silence = load_vad(), silence_cross_kv(model.net)
    cache = load_offline_cache(args.offline_cache)
    items = [i for i in read_items(args.inputs) if i.text and (i.language or "en") == "en"][k::n]
    language = "en" if model.is_multilingual else None
    out = []
    for item in tqdm(items, desc="items", file=sys.stderr):
        audio = decode_audio(item.audio)
        offline_text, _ = cached_offline(model, cache, item.id, audio, language)
        session, _ = stream_item(model.net, model.tokenizer, audio, config, silence, vad)
        at = opening_time(session)
        readings = {}
        for extra in args.extra:
            end = len(audio) if at is None else min(len(audio), int((at + extra) * SR))
            readings[str(extra)] = (offline_text if end == len(audio)  # the whole item: offline's own
                                    else offline_reference(model, audio[:end], language)[0])
        out.append({"id": item.id, "reference": item.text, "offline": offline_text,
                    "stream": session.text, "opening_at": at, "audio_s": len(audio) / SR,
                    "prefix": readings})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    report(out, args.extra)


def report(out: list[dict], extras: list[float]) -> None:
    def row(name: str, texts: list[str]) -> str:
        cells = []
        for against in ("offline", "reference"):
            errors = words = items = 0
            for item, text in zip(out, texts):
                e, w = opening_errors(item[against], text)
                errors, words, items = errors + e, words + w, items + (e > 0)
            cells.append(f"{100 * errors / max(1, words):.2f} ({items})")
        return f"| {name} | {' | '.join(cells)} |"

    print(f"\n{len(out)} items\n")
    print(f"| reader | first {OPENING_WORDS} words against offline: WER % (items) | against the reference |")
    print("|---|---|---|")
    print(row("the stream", [i["stream"] for i in out]))
    for extra in extras:
        print(row(f"offline on the audio up to the stream's opening commit + {extra:g} s",
                  [i["prefix"][str(extra)] for i in out]))
    print(row("offline (the whole item)", [i["offline"] for i in out]))


if __name__ == "__main__":
    main()
