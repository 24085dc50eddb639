"""Turns committed by the client after silence: does a span keep its first word?

A client that runs its own voice activity detection (agent frameworks do) commits each turn as
an item, and the item opens with some of the silence before the speech. For every dev and hard
item, Silero VAD finds its speech; stretches apart by 300 ms or more become spans, and each span
is cut from ``lead`` seconds before its speech (drawn from 0.1-1.5 s, seeded, never reaching
back into the speech before it) to 0.3 s after it. Each span is streamed alone (a fresh
``model.stream()``, fed in 100 ms pieces, then ``finish()``, as the server does for a committed
item) and transcribed offline alone (``model.transcribe(span, beam_size=1)``, as the REST API
does), and the stream's text is compared with offline's: the first word lost (offline's first
word has no equal word in the stream's text on a minimum-edit alignment) and the WER of the first
three words (susurrus/evaluation/edges.py), per set, and the spans that lost it are listed. The
same span transcribed offline 10 ms later (one mel frame of digital silence before it,
susurrus/evaluation/spread.py) is scored the same way against offline: the measure's noise floor,
how often offline's own first word moves with a harmless change of its input.
Where a span opens its item, the item's reference tells whose first word is right: the first word
lost is also counted only over those spans whose offline first word is the reference's (as the
bench's last-word measure counts only where offline's last word is right), and the spans whose
stream has the reference's first word where offline has not are counted beside it.

    python benchmarks/committed_spans.py [--sets dev hard] [--latency medium] [--limit N]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tqdm import tqdm  # noqa: E402

import susurrus  # noqa: E402
from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.decoding.gate import speech_probabilities, speech_spans  # noqa: E402
from susurrus.evaluation.alignment import align_words  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.edges import opening_errors  # noqa: E402
from susurrus.evaluation.metrics import normalize  # noqa: E402
from susurrus.evaluation.spread import shifted  # noqa: E402
from susurrus.streaming.vad import load_vad  # noqa: E402

SR = 16000
GAP_MS = 300  # a pause this long or longer separates two spans
AFTER_S = 0.3  # a span ends this long after its speech (a client's end-of-turn silence)


def spans_of(audio: np.ndarray, vad, rng: random.Random) -> list[tuple[int, int, bool]]:
    """``[(start, end, first)]``, start and end in samples: each stretch of speech with 0.1-1.5 s
    of the silence before it (as much as there is) and 0.3 s after it; ``first``: it is the
    item's first stretch of speech (a stretch with under 0.1 s of silence before it is left out,
    so the first span need not be the first stretch)."""
    pad = GAP_MS // 2  # stretches padded by half the gap each way merge across shorter pauses
    speech = [(a + pad * SR // 1000, b - pad * SR // 1000)
              for a, b in speech_spans(speech_probabilities(vad, audio), len(audio), pad_before_ms=pad,
                                       pad_after_ms=pad)]
    out = []
    for k, (a, b) in enumerate(speech):
        before = speech[k - 1][1] if k else 0
        after = speech[k + 1][0] if k + 1 < len(speech) else len(audio)
        lead = round(rng.uniform(0.1, 1.5) * SR)
        start = max(before, a - lead)
        if a - start >= SR // 10:  # at least 0.1 s of silence in front
            out.append((start, min(after, b + round(AFTER_S * SR)), k == 0))
    return out


def stream_text(model, audio: np.ndarray, latency: str) -> str:
    stream = model.stream(latency=latency)
    for i in range(0, len(audio), SR // 10):
        stream.feed(audio[i:i + SR // 10])
    stream.finish()
    return stream.text.strip()


def offline_text(model, audio: np.ndarray) -> str:
    segments, _ = model.transcribe(audio, beam_size=1)
    return "".join(s.text for s in segments).strip()


def first_word_lost(offline: str, stream: str) -> bool:
    ref, hyp = normalize(offline).split(), normalize(stream).split()
    return bool(ref) and 0 not in {i for i, _ in align_words(ref, hyp)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED_DATA)
    ap.add_argument("--sets", nargs="+", default=["dev", "hard"])
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--latency", default="medium", choices=["low", "medium", "high"])
    ap.add_argument("--limit", type=int, default=None, help="items per set (default: all)")
    ap.add_argument("--seed", type=int, default=52)
    args = ap.parse_args()
    model, vad = susurrus.load_model(args.model), load_vad()
    rows, lost_spans = [], []
    for name in args.sets:
        items = [i for i in read_manifest(args.data / name) if i.language == "en"][: args.limit]
        n = lost = errors = units = with_error = shift_lost = 0
        opening = opening_lost = stream_right = 0  # spans that open their item, offline's first word right
        for item in tqdm(items, desc=name, file=sys.stderr):
            audio = decode_audio(item.audio)
            rng = random.Random(f"{args.seed}/{item.id}")
            for a, b, opens in spans_of(audio, vad, rng):
                span = audio[a:b]
                offline = offline_text(model, span)
                if not normalize(offline).split():
                    continue
                streamed = stream_text(model, span, args.latency)
                n += 1
                e, u = opening_errors(offline, streamed)
                errors, units, with_error = errors + e, units + u, with_error + (e > 0)
                gone = first_word_lost(offline, streamed)
                shift_lost += first_word_lost(offline, offline_text(model, shifted(span)))
                if gone:
                    lost += 1
                    lost_spans.append(f"| {item.id} | {a / SR:.2f}-{b / SR:.2f} | {offline} | {streamed} |")
                ref = [] if item.approximate else normalize(item.text).split()
                if opens and ref:  # the item's first speech: the reference's first word is its own
                    first = normalize(offline).split()[0] == ref[0]
                    opening += first
                    opening_lost += first and gone
                    stream_right += not first and normalize(streamed).split()[:1] == ref[:1]
        rows.append(f"| {name} | {n} | {lost} ({100.0 * lost / max(1, n):.1f} %) "
                    f"| {shift_lost} ({100.0 * shift_lost / max(1, n):.1f} %) "
                    f"| {opening_lost} of {opening} ({100.0 * opening_lost / max(1, opening):.1f} %) | {stream_right} "
                    f"| {100.0 * errors / max(1, units):.2f} ({with_error}) |")
    print(f"\n{args.model}, --latency {args.latency}; spans apart by >= {GAP_MS} ms, 0.1-1.5 s of silence in front "
          f"(seed {args.seed}), {AFTER_S} s after\n")
    print("| set | spans | first word lost (offline's first word not in the stream's text) "
          "| offline 10 ms later: first word lost (the noise floor) "
          "| the same over spans that open their item, where offline's first word is the reference's "
          "| spans that open their item where the stream's first word is the reference's and offline's is not "
          "| first 3 words against offline: WER % (spans with an error) |\n|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if lost_spans:
        print("\nSpans whose first word was lost:\n\n| item | span s | offline | stream |\n|---|---|---|---|")
        print("\n".join(lost_spans))


if __name__ == "__main__":
    main()
