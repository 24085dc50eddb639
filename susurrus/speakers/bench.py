"""``susurrus bench --diarize``: speaker labels on the assembled conversations
(:mod:`~susurrus.speakers.conversations`), scored with ``pyannote.metrics``.

Two runs per conversation, both from the same embeddings (1.6 s windows every 0.5 s of voiced
audio, the stream's tracker):

- **diarizer**: the stream's Silero VAD speech cut into 0.5 s pieces stand in for words; each is
  labelled online when the audio has reached its end plus ``lag`` (the stream's commit latency),
  exactly as a committed word is; and offline (agglomerative clustering of every window).
- **stream** (``asr``: the first N conversations of each set): the real stream
  (``model.stream(diarize=True)``), its committed words and their labels; WDER needs words.

DER: ``DiarizationErrorRate(collar=0.25)`` against the conversations' turns (the hypothesis: the
labelled pieces or words, a speaker's consecutive ones less than 0.5 s apart joined). WDER (Shafey
et al., 2019): the share of words whose speaker, mapped to the reference by pyannote's optimal
mapping, is not the reference speaker over most of the word (words outside the reference speech
not counted). Speaker count: the labels used equal the conversation's speakers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from susurrus.speakers import conversations as conv_mod
from susurrus.speakers.cluster import SpeakerConfig
from susurrus.speakers.encoder import DEFAULT_ENCODER
from susurrus.speakers.tracker import SpeakerTracker

PIECE_S = 0.5
STEP = 1600  # audio pushed 0.1 s at a time


def _annotation(spans: Sequence[tuple[float, float, str]], join: float = 0.5):
    from pyannote.core import Annotation, Segment

    ann = Annotation()
    merged: list[list] = []
    for a, b, s in sorted(spans):
        if merged and merged[-1][2] == s and a - merged[-1][1] < join:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b, s])
    for i, (a, b, s) in enumerate(merged):
        if b > a:
            ann[Segment(a, b), i] = s
    return ann


def score(turns, spans: Sequence[tuple[float, float, str]]) -> dict:
    """DER (and its parts) and WDER of labelled ``spans`` against ``turns``."""
    from pyannote.metrics.diarization import DiarizationErrorRate

    ref, hyp = _annotation(turns, join=0.0), _annotation(spans)
    metric = DiarizationErrorRate(collar=0.25)
    d = metric(ref, hyp, detailed=True)
    mapping = metric.optimal_mapping(ref, hyp)
    wrong = counted = 0
    for a, b, s in spans:
        over: dict[str, float] = {}
        for ra, rb, rs in turns:
            o = min(b, rb) - max(a, ra)
            if o > 0:
                over[rs] = over.get(rs, 0.0) + o
        if over:
            counted += 1
            wrong += mapping.get(s) != max(over, key=over.get)
    total = d["total"] or 1.0
    return {"der": d["diarization error rate"], "miss": d["missed detection"] / total,
            "fa": d["false alarm"] / total, "conf": d["confusion"] / total,
            "wder": wrong / counted if counted else 0.0, "found": len({s for *_, s in spans}),
            "true": len({s for *_, s in turns})}


def _voiced_fn(audio: np.ndarray):
    from susurrus.streaming.vad import FRAME_MS, VadState, load_vad, push_vad, speech_fraction

    state = VadState(history_frames=len(audio) // 512 + 10)
    probs = push_vad(load_vad(), state, audio, final=True)
    regions: list[list[float]] = []
    for i in np.flatnonzero(probs >= 0.5):
        a, b = i * FRAME_MS / 1000, (i + 1) * FRAME_MS / 1000
        if regions and a - regions[-1][1] < 0.25:
            regions[-1][1] = b
        else:
            regions.append([a, b])
    return (lambda a, b: speech_fraction(state, a * 1000, b * 1000)), regions


def run_diarizer(conv, lag: float, config: SpeakerConfig | None = None) -> tuple[dict, dict, float]:
    """(online scores, offline scores, CPU seconds of the tracker)."""
    voiced, regions = _voiced_fn(conv.audio)
    pieces = [(a, min(b, a + PIECE_S)) for ra, rb in regions for a in np.arange(ra, rb, PIECE_S) for b in [rb]]
    tracker = SpeakerTracker(config, keep_all=True)
    online: list[tuple[float, float, str]] = []
    nxt = 0
    t0 = time.process_time()
    for i in range(0, len(conv.audio), STEP):
        tracker.push(conv.audio[i: i + STEP], voiced)
        now = (i + STEP) / 16000
        due = [p for p in pieces[nxt:] if p[1] + lag <= now]
        if due:
            online += [(a, b, s) for (a, b), s in zip(due, tracker.label(due), strict=True)]
            nxt += len(due)
    rest = pieces[nxt:]
    online += [(a, b, s) for (a, b), s in zip(rest, tracker.label(rest), strict=True)]
    cpu = time.process_time() - t0
    offline = [(a, b, s) for (a, b), s in zip(pieces, tracker.label_offline(pieces), strict=True)]
    return score(conv.turns, online), score(conv.turns, offline), cpu


def run_stream(model, conv) -> tuple[dict, dict, float, float]:
    """(online scores, offline scores, median commit lag, text identical without diarize)."""
    from susurrus.speakers import make_tracker

    s = model.stream(speaker_tracker=make_tracker(keep_all=True))
    blocks = [conv.audio[i: i + STEP] for i in range(0, len(conv.audio), STEP)]
    list(s.events(blocks))
    words = [w for w in s.words if w.end > w.start]
    online = [(w.start, w.end, w.speaker) for w in words]
    labels = s.speakers.label_offline([(w.start, w.end) for w in words])
    offline = [(w.start, w.end, lab) for w, lab in zip(words, labels, strict=True)]
    lag = float(np.median([w.emitted_at - w.end for w in words])) if words else 0.0
    return score(conv.turns, online), score(conv.turns, offline), lag, s.text


def _plain_text(model, conv) -> str:
    s = model.stream()
    list(s.events([conv.audio[i: i + STEP] for i in range(0, len(conv.audio), STEP)]))
    return s.text


def main(data_root: Path, model=None, asr: int = 0, lag: float = 1.0, out=print, only: Sequence[str] = (),
         limit: int | None = None, seed: int = conv_mod.SEED, encoder: str = DEFAULT_ENCODER) -> dict:
    """Print the tables; ``asr``: also stream the first ``asr`` conversations of each set;
    ``only``: these sets; ``limit``: the first conversations of each set; ``seed``: the set
    built from this seed (:func:`~susurrus.speakers.conversations.build`; another seed, a
    held-out set); ``encoder``: the speaker encoder (the diarizer rows only; its own
    thresholds, ``settings.ENCODER_SPECS``)."""
    paths = conv_mod.build(data_root, seed=seed)
    sets: dict[str, list] = {}
    for p in paths:
        name = p.stem.rsplit("_", 1)[0]
        if (not only or name in only) and len(sets.get(name, [])) < (limit or 10**9):
            sets.setdefault(name, []).append(conv_mod.load(p))
    rows = {}
    out("| set | convs | audio s | online DER | (miss/FA/conf) | offline DER | online WDER | offline WDER "
        "| count right online | offline | diarizer CPU s per audio s |")
    out("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, convs in sets.items():
        res = [run_diarizer(c, lag, SpeakerConfig(encoder=encoder)) for c in convs]
        dur = sum(len(c.audio) for c in convs) / 16000
        on = [r[0] for r in res]
        off = [r[1] for r in res]
        row = _row(name, convs, dur, on, off, sum(r[2] for r in res) / dur)
        rows[name] = row
        out(row)
    if asr and model is not None:
        out("\nReal stream (tiny.en or the model given), first conversations of each set:\n")
        out("| set | convs | online DER | offline DER | online WDER | offline WDER | count right "
            "| median commit lag s | text same without diarize |")
        out("|---|---|---|---|---|---|---|---|---|")
        for name, convs in sets.items():
            res = [run_stream(model, c) for c in convs[:asr]]
            on, off = [r[0] for r in res], [r[1] for r in res]
            same = sum(_plain_text(model, c) == r[3] for c, r in zip(convs, res, strict=False))
            out(f"| {name} | {len(res)} | {_mean(on, 'der'):.1%} | {_mean(off, 'der'):.1%} | {_mean(on, 'wder'):.1%} "
                f"| {_mean(off, 'wder'):.1%} | {_count(on)} | {np.median([r[2] for r in res]):.2f} "
                f"| {same}/{len(res)} |")
    return rows


def _mean(rs: list[dict], k: str) -> float:
    return float(np.mean([r[k] for r in rs]))


def _count(rs: list[dict]) -> str:
    return f"{sum(r['found'] == r['true'] for r in rs)}/{len(rs)}"


def _row(name, convs, dur, on, off, cpu) -> str:
    parts = f"{_mean(on, 'miss'):.1%}/{_mean(on, 'fa'):.1%}/{_mean(on, 'conf'):.1%}"
    return (f"| {name} | {len(convs)} | {dur:.0f} | {_mean(on, 'der'):.1%} | {parts} | {_mean(off, 'der'):.1%} "
            f"| {_mean(on, 'wder'):.1%} | {_mean(off, 'wder'):.1%} | {_count(on)} | {_count(off)} | {cpu:.3f} |")


def cli_main(args) -> int:
    """``susurrus bench --diarize DATA_ROOT``."""
    model = None
    if args.diarize_asr:
        import susurrus

        model = susurrus.load_model(args.model, threads=args.threads, compute_type=args.compute_type)
    main(Path(args.inputs[0]), model, asr=args.diarize_asr, encoder=args.speaker_encoder)
    return 0
