"""Speech with real repetitions, built from recorded items: what the data lacks for the loop guards.

Speakers repeat themselves (counting, "no no no", digit strings, a phrase said again); a loop
guard must keep those and still stop a decoder that loops. Two kinds of items, each a benchmark
condition (``repetition (word)``, ``repetition (utterance)``):

* a phrase of 1-2 words cut out of an item at the midpoints of the pauses around it (the
  offline words' times) and said 3, 4 or 5 times, with 0.15-0.4 s of the item's own quietest
  audio between the copies (digit strings of hard/ and dev items);
* a whole short item (at most ``SHORT_S``) said three times with 0.5 s of pause between.

The reference is the offline text of the copy that many times; what is scored is whether the
stream keeps the copies offline greedy keeps (``longest repetition`` of the bench, per item,
beside offline's own). ``python -m susurrus.evaluation.repeats OUT_DIR`` writes ``OUT_DIR/manifest.jsonl``
and its audio, the same every time from the same data and model."""

from __future__ import annotations

import argparse
import json
import wave
from pathlib import Path

import numpy as np

from susurrus.audio import SAMPLE_RATE, decode_audio
from susurrus.evaluation.data import SHARED_DATA, Item, read_items

SHORT_S = 3.5
PAUSES_S = (0.15, 0.25, 0.4)
COUNTS = (3, 4, 5)


def quiet(audio: np.ndarray, seconds: float) -> np.ndarray:
    """``seconds`` of the item's quietest audio (its own background, not digital silence)."""
    n = int(seconds * SAMPLE_RATE)
    if len(audio) <= n:
        return np.zeros(n, np.float32)
    hop = SAMPLE_RATE // 100
    energy = np.array([float(np.square(audio[i:i + n]).mean()) for i in range(0, len(audio) - n, hop)])
    start = int(energy.argmin()) * hop
    return audio[start:start + n].astype(np.float32)


def phrase_cut(words, audio_s: float, index: int) -> tuple[float, float, str] | None:
    """A phrase of 1-2 words among ``words`` (offline, timed) to repeat: the ``index``-th choice
    (deterministic), cut at the midpoints of the gaps around it; None when no word is long
    enough to stand alone (0.2 s)."""
    spans = []
    for n in (1, 2):
        for i in range(len(words) - n + 1):
            a, b = words[i], words[i + n - 1]
            text = " ".join(w.word.strip() for w in words[i:i + n])
            if b.end - a.start < 0.2 * n or not any(c.isalnum() for c in text):
                continue
            start = (words[i - 1].end + a.start) / 2 if i else max(0.0, a.start - 0.1)
            end = (b.end + words[i + n].start) / 2 if i + n < len(words) else min(audio_s, b.end + 0.1)
            spans.append((start, end, text))
    return spans[index % len(spans)] if spans else None


def write_wav(path: Path, audio: np.ndarray) -> None:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes(pcm.tobytes())


def build(items: list[Item], model, out: Path) -> list[dict]:
    """Write the repetition items made from ``items`` (English) under ``out``; their manifest rows."""
    (out / "audio").mkdir(parents=True, exist_ok=True)
    rows = []
    for n, item in enumerate(it for it in items if it.language == "en"):
        audio = decode_audio(str(item.audio))
        segments, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, language="en")
        words = [w for s in segments for w in s.words or []]
        made = []
        cut = phrase_cut(words, len(audio) / SAMPLE_RATE, n)
        if cut is not None:
            a, b, text = cut
            k, pause = COUNTS[n % len(COUNTS)], PAUSES_S[n % len(PAUSES_S)]
            copy = audio[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]
            made.append(("word", copy, text, k, pause))
        if item.duration_s <= SHORT_S and item.text:
            made.append(("utterance", audio, " ".join(w.word.strip() for w in words), 3, 0.5))
        for kind, copy, text, k, pause in made:
            gap = quiet(audio, pause)
            lead = quiet(audio, 0.3)
            joined = np.concatenate([lead] + [np.concatenate([copy, gap]) for _ in range(k)])
            rid = f"rep_{kind}_{k}x_{item.id}"
            write_wav(out / "audio" / f"{rid}.wav", joined)
            rows.append({"id": rid, "audio": f"audio/{rid}.wav", "text": " ".join([text] * k),
                         "duration_s": round(len(joined) / SAMPLE_RATE, 3), "language": "en",
                         "condition": f"repetition ({kind})", "source": f"{item.set}/{item.id}, said {k} times",
                         "license": "as the source item"})
    with open(out / "manifest.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def default_items(data: Path = SHARED_DATA) -> list[Item]:
    """The items repeated by default: hard/'s digit strings and number items, and dev's English items."""
    hard = [i for i in read_items([data / "hard"]) if "numbers" in i.condition and i.duration_s <= 6]
    return hard + read_items([data / "dev"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m susurrus.evaluation.repeats", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder to write manifest.jsonl and audio/ into")
    p.add_argument("--data", type=Path, default=SHARED_DATA, help="the shared data folder (holds hard/ and dev/)")
    p.add_argument("--model", default="tiny.en", help="the model whose offline words cut the phrases")
    args = p.parse_args(argv)
    import susurrus

    rows = build(default_items(args.data), susurrus.load_model(args.model), args.out)
    print(f"{len(rows)} items written to {args.out / 'manifest.jsonl'}")


if __name__ == "__main__":
    main()
