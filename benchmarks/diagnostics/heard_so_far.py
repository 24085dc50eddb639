"""Is a streamed word that offline does not say what offline Whisper says on the audio heard so far?

For every labelled item whose stream is more than ``--worse`` points worse than the same model
offline (the bench's reference: greedy with the temperature fallback), each committed word that
the offline text does not have (the stream's own errors against offline, on a minimum-edit
alignment) is looked up in the offline transcription of the audio up to the moment the word was
committed. A word found there is one that Whisper itself says until it hears what follows: a
stream that commits ~1 s after a word cannot avoid it without waiting for the rest of the
sentence (committed text is final). A word not found there is the stream's own.

    python benchmarks/diagnostics/heard_so_far.py ../shared/data/hard ../shared/data/dev \
        [--latency medium] [--offline-cache /tmp/off_tiny_all.json] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation.alignment import align_words, normalized_words
from susurrus.evaluation.bench import stream_item
from susurrus.evaluation.data import read_items
from susurrus.evaluation.metrics import error_counts, normalize
from susurrus.evaluation.reference import cached_offline, load_offline_cache
from susurrus.streaming.config import stream_config
from susurrus.streaming.session import silence_cross_kv
from susurrus.streaming.vad import load_vad

SR = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="manifests or folders holding one (labelled items only)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--latency", default="medium", help="preset (low/medium/high)")
    ap.add_argument("--worse", type=float, default=15.0, help="items this many WER points worse than offline")
    ap.add_argument("--offline-cache", help="the bench's offline cache, read and extended")
    ap.add_argument("--json", help="per item: texts and each differing word with what offline said then")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    config = stream_config(args.latency)
    vad = load_vad()
    silence = silence_cross_kv(model.net)
    cache = load_offline_cache(args.offline_cache)
    items = [i for i in read_items(args.inputs) if i.text and (i.language or "en") == "en"]
    found = total = n_items = 0
    out = []
    for item in tqdm(items, desc="items", file=sys.stderr, disable=not sys.stderr.isatty()):
        audio = decode_audio(item.audio)
        offline_text, _ = cached_offline(model, cache, item.id, audio, "en" if model.is_multilingual else None)
        session, _ = stream_item(model.net, model.tokenizer, audio, config, silence, vad)
        stream_errors, n = error_counts(item.text, session.text)
        gap = 100 * (stream_errors - error_counts(item.text, offline_text)[0]) / max(1, n)
        if gap <= args.worse:
            continue
        n_items += 1
        stream_tokens, owner = normalized_words(session.words)
        matched = {h for _, h in align_words(normalize(offline_text).split(), stream_tokens)}
        prefix_text: dict[float, str] = {}
        words = []
        for h, token in enumerate(stream_tokens):
            if h in matched:
                continue
            at = session.words[owner[h]].emitted_at
            if at not in prefix_text:
                segments, _ = model.transcribe(audio[:int(at * SR)], beam_size=1,
                                               language="en" if model.is_multilingual else None)
                prefix_text[at] = " ".join(s.text.strip() for s in segments)
            said = token in normalize(prefix_text[at]).split()
            found += said
            total += 1
            words.append({"word": token, "committed_at": at, "offline_then": prefix_text[at], "said": said})
        out.append({"id": item.id, "points_worse": round(gap, 1), "reference": item.text,
                    "stream": session.text, "offline": offline_text, "differing": words})
        print(f"{item.id:40s} +{gap:5.1f}  {sum(w['said'] for w in words)}/{len(words)} "
              f"differing words said by offline on the audio so far", flush=True)
    share = 100 * found / max(1, total)
    print(f"\n{n_items} items more than {args.worse:g} points worse than offline ({args.latency}); "
          f"of their {total} committed words that offline's full text does not have, {found} ({share:.0f} %) "
          f"are in offline's transcription of the audio up to the moment they were committed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.offline_cache:
        with open(args.offline_cache, "w") as f:
            json.dump(cache, f)


if __name__ == "__main__":
    main()
