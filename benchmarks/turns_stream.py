"""Speech turns end to end: server_vad turns inside a transcribing stream, with and without the
text-aware end of turn.

``benchmarks/turns.py`` scores the VAD and turn tracker alone; this runs the whole stream
(VAD gating, Whisper, guard, turn flushes) on the long-form dev streams (the ``longform``
manifest, whose ``segments`` give each utterance's start, end and text), fed in ``--piece-ms``
pieces (100 ms by default, as a realtime client's appends; the text does not depend on the piece
size) as fast as it computes, one thread. Variants of the audio:

- ``gaps 1.5 s``: ``--gap`` seconds of digital silence inserted in the middle of every pause
  between utterances (``signals.insert_gaps``), so that every utterance should be one turn;
- ``natural``: the streams as recorded (0.4 s pauses in the LJSpeech stream, 0.7 s in the
  mixed one), to count turns split at pauses inside utterances and merged across them.

Settings: ``server_vad`` (``turns=TurnConfig()``: 0.5 / 300 ms / 500 ms) and ``semantic``
(the same with ``semantic_turns=True``: 192 ms into each pause the turn is decoded as if the audio
ended there; 350 ms of silence end it when that text ends a sentence whose punctuation the decoder
gave p >= 0.95, 1000 ms when it trails off, see ``text_turn_silence_ms``); with ``--settings``
also ``server_vad_400`` / ``_450`` / ``_600`` (silence alone at other durations) and
``semantic_600`` (the text-aware end over a 600 ms base).

Boundary table, over all utterances (as ``benchmarks/turns.py``; a turn covers an utterance when
their raw speech intervals ``speech_start_ms``..``speech_end_ms`` intersect): the fraction whose
onset is within ``--tol`` of the utterance start, by ``speech_start_ms`` (the raw onset) and by
``audio_start_ms`` (OpenAI's: onset minus the 300 ms prefix padding); the same for the end, by
``speech_end_ms`` (raw) and by ``audio_end_ms`` (OpenAI's: when the stop was decided, so speech
end plus the silence duration: by definition outside a 0.3 s tolerance with 500 ms of silence);
median signed errors (turn minus reference); ``split``: utterances covered by two or more turns;
``merged``: utterances that share a turn with another (and, after the slash, turns covering more
than one utterance); ``missed``: utterances no turn covers; ``false``: turns covering none.
Reference boundaries: the manifest's segments, and (``speech``) the segments trimmed to their
audible speech (several LibriSpeech/LibriVox clips open with 0.3-0.6 s of silence).

Text and delay table: ``1:1``: turns that cover exactly one utterance which no other turn covers;
per-turn WER: pooled over those, ``TurnEnded.text`` against the utterance's text; stream WER:
all committed text against the manifest's; ``outside``: committed words that no ``TurnEnded``
carried; decision delay: ``SpeechStopped.audio_end_ms - speech_end_ms`` (audio the tracker waited
for); delivery delay: from the speech end to the moment the caller holds the ``TurnEnded`` with its
text, in audio time when streamed in real time: the audio fed when ``feed`` returned it, plus the
wall time of that ``feed`` call (the final flush's compute), minus ``speech_end_ms``. Both over
every turn closed by silence (turns closed by the end of the stream are left out), then split by
whether the turn's text ends a sentence (``.?!``) or not.

    python benchmarks/turns_stream.py [--gap 1.5] [--tol 0.3] [--piece-ms 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm
from turns import score, trim_to_speech  # benchmarks/turns.py: the VAD-only benchmark's scoring

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.session import TurnEnded
from susurrus.streaming.vad import SENTENCE_END, SpeechStarted, SpeechStopped, TurnConfig

SETTINGS: dict[str, dict] = {
    "plain": {},  # no turn detection: the stream the turns must not be worse than
    "server_vad": {"turns": TurnConfig()},
    "semantic": {"turns": TurnConfig(), "semantic_turns": True},
}
# silence alone at other durations, and the text-aware end over another base (``--settings``): the
# trade-off between ending sooner and splitting utterances at pauses inside them
for _ms in (400, 450, 600):
    SETTINGS[f"server_vad_{_ms}"] = {"turns": TurnConfig(silence_duration_ms=_ms)}
SETTINGS["semantic_600"] = {"turns": TurnConfig(silence_duration_ms=600), "semantic_turns": True}


@dataclass
class Turn:
    started: SpeechStarted
    stopped: SpeechStopped | None = None
    ended: TurnEnded | None = None
    delivered_ms: float = float("nan")  # audio time (real-time equivalent) the caller got TurnEnded
    at_finish: bool = False


@dataclass
class StreamRun:
    turns: list[Turn] = field(default_factory=list)
    words: list = field(default_factory=list)
    text: str = ""
    cpu_s: float = 0.0
    audio_s: float = 0.0


def run(model, audio: np.ndarray, settings: dict, piece_ms: int, label: str) -> StreamRun:
    stream = model.stream(**settings)
    piece = piece_ms * 16
    out = StreamRun(audio_s=len(audio) / 16000)
    bar = tqdm(total=round(len(audio) / 16000), desc=label, unit="s audio", file=sys.stderr, leave=False)

    def take(events, wall_s: float, at_finish: bool = False) -> None:
        fed_ms = stream.samples_fed / 16
        for ev in events:
            if isinstance(ev, SpeechStarted):
                out.turns.append(Turn(ev))
            elif isinstance(ev, SpeechStopped):
                out.turns[-1].stopped = ev
                out.turns[-1].at_finish = at_finish
            elif isinstance(ev, TurnEnded):
                out.turns[-1].ended = ev
                out.turns[-1].delivered_ms = fed_ms + 1000 * wall_s

    t0 = time.process_time()
    for i in range(0, len(audio), piece):
        w0 = time.perf_counter()
        events = stream.feed(audio[i:i + piece])
        take(events, time.perf_counter() - w0)
        bar.update(len(audio[i:i + piece]) / 16000)
    w0 = time.perf_counter()
    events = stream.finish()
    take(events, time.perf_counter() - w0, at_finish=True)
    out.cpu_s = time.process_time() - t0
    bar.close()
    out.words, out.text = list(stream.words), stream.text
    return out


def one_to_one(turns: list[Turn], segments: list[dict]) -> list[tuple[int, int]]:
    """(turn, utterance) pairs where the turn covers exactly that utterance and no other turn does."""
    refs = [(1000 * s["start_s"], 1000 * s["end_s"]) for s in segments]
    spans = [(t.started.speech_start_ms, t.stopped.speech_end_ms) for t in turns]
    by_seg = [[j for j, (t0, t1) in enumerate(spans) if t0 < e and t1 > s] for s, e in refs]
    by_turn = [[i for i, (s, e) in enumerate(refs) if t0 < e and t1 > s] for t0, t1 in spans]
    return [(j, segs[0]) for j, segs in enumerate(by_turn) if len(segs) == 1 and by_seg[segs[0]] == [j]]


def _stats(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.0f} / {statistics.median(xs):.0f}" if xs else "-"


def _median(xs: list) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", default=str(SHARED_DATA / "longform"))
    ap.add_argument("--gap", type=float, default=1.5, help="seconds of silence inserted between utterances")
    ap.add_argument("--tol", type=float, default=0.3, help="boundary tolerance, seconds")
    ap.add_argument("--piece-ms", type=int, default=100, help="audio per feed call")
    ap.add_argument("--variants", default="gaps,natural")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--seconds", type=float, default=None, help="only the utterances in each stream's first seconds")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = read_manifest(args.data)
    clips = [decode_audio(str(i.audio)) for i in items]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{args.model} at {commit}, 1 thread, {args.piece_ms} ms pieces; tolerance {args.tol} s; "
          f"{len(items)} long-form streams\n")
    bounds_rows, text_rows, details = [], [], []
    for variant in args.variants.split(","):
        vname = f"gaps {args.gap:g} s" if variant == "gaps" else variant
        streams = []
        for item, audio in zip(items, clips):
            segs = item.segments
            if args.seconds:
                segs = [s for s in segs if s["end_s"] <= args.seconds]
                audio = audio[:int(16000 * (segs[-1]["end_s"] + 0.2))]
            if variant == "gaps":
                audio, segs = signals.insert_gaps(audio, segs, args.gap)
            streams.append((item, audio, segs))
        for setting in args.settings.split(","):
            runs = []
            for item, audio, segs in streams:
                r = run(model, audio, SETTINGS[setting], args.piece_ms, f"{vname} {setting} {item.id[:20]}")
                runs.append((item, audio, segs, r))
                print(f"{vname} {setting} {item.id}: {len(r.turns)} turns, cpu {r.cpu_s:.0f} s", file=sys.stderr)
            for reference in ("segments", "speech"):
                tot: dict = {}
                n_merging = n_turns = 0
                for _item, audio, segs, r in runs:
                    ref = segs if reference == "segments" else trim_to_speech(audio, segs)
                    closed = [t for t in r.turns if t.stopped is not None]
                    res = score([(t.started, t.stopped) for t in closed], ref, 1000 * args.tol)
                    res["audio_end"] = [t.stopped.audio_end_ms for t in closed]
                    # OpenAI's audio_end_ms against the reference end of the last utterance each turn covers
                    refs = [(1000 * s["start_s"], 1000 * s["end_s"]) for s in ref]
                    spans = [(t.started.speech_start_ms, t.stopped.speech_end_ms) for t in closed]
                    by_seg = [[j for j, (t0, t1) in enumerate(spans) if t0 < e and t1 > s] for s, e in refs]
                    res["audio_end_ok"] = sum(abs(closed[js[-1]].stopped.audio_end_ms - e) <= 1000 * args.tol
                                              for (_, e), js in zip(refs, by_seg) if js)
                    res["audio_end_med"] = [closed[js[-1]].stopped.audio_end_ms - e for (_, e), js in zip(refs, by_seg)
                                            if js]
                    res["padded_med"] = [closed[js[0]].started.audio_start_ms - s for (s, _), js in zip(refs, by_seg)
                                         if js]
                    n_turns += len(closed)
                    n_merging += sum(sum(t0 < e and t1 > s for s, e in refs) > 1 for t0, t1 in spans)
                    for k, v in res.items():
                        if isinstance(v, list):
                            tot[k] = tot.get(k, []) + v
                        elif k in ("onset", "padded", "end"):
                            tot[k] = tot.get(k, 0) + v * res["utterances"]
                        else:
                            tot[k] = tot.get(k, 0) + v
                n = tot["utterances"]
                bounds_rows.append(
                    f"| {vname} | {setting} | {reference} | {n} | {n_turns} | {tot['onset'] / n:.0%} "
                    f"| {tot['padded'] / n:.0%} | {tot['end'] / n:.0%} | {tot['audio_end_ok'] / n:.0%} "
                    f"| {_median(tot['onset_err'])} | {_median(tot['padded_med'])} "
                    f"| {_median(tot['end_err'])} | {_median(tot['audio_end_med'])} "
                    f"| {tot['split']} | {tot['merged']} / {n_merging} | {tot['missed']} | {tot['false']} |")
            pairs, all_pairs, turn_pairs = [], [], []
            decision, delivery, dec_end, dec_other, del_end, del_other = [], [], [], [], [], []
            outside = n_turns = at_finish = cpu = audio_s = 0.0
            longest = 0.0
            turns = SETTINGS[setting].get("turns")
            base = turns.silence_duration_ms if turns else 0
            for item, _audio, segs, r in runs:
                closed = [t for t in r.turns if t.stopped is not None]
                n_turns += len(closed)
                cpu += r.cpu_s
                audio_s += r.audio_s
                ref_text = item.text if not args.seconds else " ".join(s["text"] for s in segs)
                all_pairs.append((ref_text, r.text))
                turn_pairs.append((ref_text, " ".join(t.ended.text for t in closed if t.ended is not None)))
                outside += len(r.words) - sum(len(t.ended.words) for t in closed if t.ended is not None)
                for j, k in one_to_one(closed, segs):
                    pairs.append((segs[k]["text"], closed[j].ended.text if closed[j].ended else ""))
                for t in closed:
                    longest = max(longest, (t.stopped.speech_end_ms - t.started.speech_start_ms) / 1000)
                    if t.at_finish:
                        at_finish += 1
                        continue
                    d = t.stopped.audio_end_ms - t.stopped.speech_end_ms
                    v = t.delivered_ms - t.stopped.speech_end_ms
                    decision.append(d)
                    delivery.append(v)
                    finished = t.ended is not None and SENTENCE_END.search(t.ended.text.strip())
                    (dec_end if finished else dec_other).append(d)
                    (del_end if finished else del_other).append(v)
                    if t.ended is not None and not t.ended.text.strip():
                        details.append(f"{vname} {setting} {item.id}: turn {t.started.speech_start_ms}-"
                                       f"{t.stopped.speech_end_ms} ms with no text")
            text_rows.append(
                f"| {vname} | {setting} | {int(n_turns)} | {len(pairs)} | {corpus_error_rate(pairs):.2f} "
                f"| {corpus_error_rate(all_pairs):.2f} | {corpus_error_rate(turn_pairs):.2f} | {int(outside)} "
                f"| {sum(d < base for d in decision)} / {sum(d > base + 32 for d in decision)} "
                f"| {_stats(decision)} | {_stats(delivery)} "
                f"| {len(dec_end)}: {_stats(dec_end)} "
                f"| {len(dec_other)}: {_stats(dec_other)} | {_stats(del_end)} | {_stats(del_other)} "
                f"| {int(at_finish)} | {longest:.1f} | {cpu / audio_s:.3f} |")
    print("| audio | setting | reference | utterances | turns | onset ok (speech_start) | onset ok (audio_start) "
          "| end ok (speech_end) | end ok (audio_end) | median onset err ms (speech / audio_start) | | "
          "median end err ms (speech / audio_end) | | split | merged utt / turns | missed | false |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(bounds_rows))
    print("\n| audio | setting | turns | 1:1 turns | per-turn WER % (1:1) | stream WER % | WER % of all turns' text "
          "| words outside turns | turns ended sooner / later than the base silence | decision delay ms mean / median "
          "| delivery delay ms mean / median "
          "| decision after sentence end: n: mean / median | decision otherwise: n: mean / median "
          "| delivery after sentence end | delivery otherwise | turns closed at finish | longest turn s "
          "| core-s / audio-s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(text_rows))
    if details:
        print("\n" + "\n".join(details))


if __name__ == "__main__":
    main()
