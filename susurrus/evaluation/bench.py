"""Streaming benchmark: accuracy, latency, cost and health of the live engine on a manifest.

Every item is streamed in simulated real time (the audio is fed in ``chunk_ms`` pieces, as a
live source would deliver it; latency is algorithmic, in audio time) and transcribed offline by
the same model as ``susurrus transcribe`` does it (greedy here, with the temperature fallback).
Reported, per setting, per condition and for the worst items:

* WER of the committed text (Whisper's English normaliser; CER for Chinese and Japanese), beside
  the offline WER on the same items; and the *agreement*: WER of the stream against the offline
  text, which needs no reference, so unlabelled audio can be checked too;
* per-word latency: ``emitted_at`` minus the word's end time, the end taken from the offline
  word timestamps and matched to committed words by alignment; and the same for the moment the
  word was first on screen in its final form, committed or in the interim guess, with the guess's
  churn (:mod:`~susurrus.evaluation.viewer`);
* health: the longest back-to-back repetition of a committed phrase (a loop), the longest delay
  between the end of a word the offline model heard and the stream's first commit reaching it (a
  stall), and offline words inside audio the voice activity gate never encoded that the stream's
  text lacks (lost speech; in brackets all offline words in that audio, by offline timing alone);
* core-seconds per audio-second (process CPU time, 1 thread unless told), the median compute
  time of one step, peak RSS; and the cost of re-encoding the whole padded 30 s buffer at every
  step (what window-re-transcribing tools do), measured in the same run.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from tqdm import tqdm

from susurrus.audio.features import N_FRAMES, log_mel_spectrogram, pad_or_trim
from susurrus.audio.io import decode_audio
from susurrus.evaluation import edges, health, spread
from susurrus.evaluation.data import Item
from susurrus.evaluation.metrics import error_counts
from susurrus.evaluation.reference import cached_offline, load_offline_cache
from susurrus.evaluation.viewer import Display, word_latencies
from susurrus.streaming.config import lookahead_for, lookahead_label
from susurrus.streaming.session import StreamConfig, StreamSession, silence_cross_kv
from susurrus.streaming.vad import load_vad
from susurrus.types import Word

CHAR_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # scored by characters


class AudioError(ValueError):
    """An item's audio cannot be read."""


def unit_for(language: str) -> str:
    return "char" if language in CHAR_LANGUAGES else "word"


@dataclass
class ItemResult:
    id: str
    language: str
    conditions: list[str]
    audio_s: float
    reference: str | None  # None: unlabelled (only agreement and health are measured)
    stream_text: str
    offline_text: str
    stream_errors: int = 0
    offline_errors: int = 0
    reference_units: int = 0
    agreement_errors: int = 0  # stream against offline
    offline_units: int = 0
    latencies: list[float] = field(default_factory=list)
    shown_latencies: list[float] = field(default_factory=list)  # first on screen in final form
    churn: int = 0  # words on screen replaced or taken back
    words: int = 0  # committed words
    repetition: int = 0  # most times a committed phrase repeats back to back
    offline_repetition: int = 0  # ... in offline's text (a speaker's own repeats are there too)
    max_delay_s: float = 0.0  # longest wait from an offline word's end to a commit reaching it
    gated_words: list[str] = field(default_factory=list)  # offline words in audio the gate never encoded
    lost_words: list[str] = field(default_factory=list)  # ... of them, those the stream's text lacks
    cpu_s: float = 0.0
    steps: int = 0
    shifted_errors: int | None = None  # offline over the audio 10 ms later (``--offline-spread``)
    shifted_text: str | None = None

    def wer(self) -> float:
        return 100.0 * self.stream_errors / max(1, self.reference_units)

    def offline_wer(self) -> float:
        return 100.0 * self.offline_errors / max(1, self.reference_units)

    def shifted_wer(self) -> float:
        return 100.0 * (self.shifted_errors or 0) / max(1, self.reference_units)


@dataclass
class BenchResult:
    config: StreamConfig
    items: list[ItemResult] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    full_encode_s: float = 0.0  # one padded 30 s encode, CPU seconds (median)
    peak_rss_mb: float = 0.0

    @property
    def audio_s(self) -> float:
        return sum(i.audio_s for i in self.items)

    @property
    def latencies(self) -> list[float]:
        return [lat for i in self.items for lat in i.latencies]

    @property
    def wer(self) -> float:
        return _rate(self.items, "stream_errors")

    @property
    def offline_wer(self) -> float:
        return _rate(self.items, "offline_errors")

    @property
    def agreement(self) -> float:
        return 100.0 * sum(i.agreement_errors for i in self.items) / max(1, sum(i.offline_units for i in self.items))

    @property
    def cost(self) -> float:
        return sum(i.cpu_s for i in self.items) / max(self.audio_s, 1e-9)

    @property
    def reencode_cost(self) -> float:
        return sum(i.steps for i in self.items) * self.full_encode_s / max(self.audio_s, 1e-9)

    def latency(self, q: float) -> float:
        lat = self.latencies
        return float(np.percentile(lat, q)) if lat else float("nan")

    @property
    def mean_latency(self) -> float:
        lat = self.latencies
        return float(np.mean(lat)) if lat else float("nan")

    def row(self) -> str:
        c = self.config
        chunk = f"{c.chunk_ms} (phase {c.step_phase_ms})" if c.step_phase_ms else f"{c.chunk_ms}"
        return (f"| {chunk} | {lookahead_label(c)} | {c.commit_margin_ms} | {c.policy} | {self.wer:.2f} "
                f"| {self.offline_wer:.2f} | {self.agreement:.2f} | {self.mean_latency:.2f} | {self.latency(50):.2f} "
                f"| {self.latency(90):.2f} | {self.cost:.3f} | {self.reencode_cost:.2f} "
                f"| {1000 * statistics.median(self.step_times or [0.0]):.0f} | {self.peak_rss_mb:.0f} |")

    def viewer_row(self) -> str:
        """Committed latency beside the first moment each word was on screen in its final form."""
        shown, words = [x for i in self.items for x in i.shown_latencies], sum(i.words for i in self.items)
        stats = [f"{np.mean(x):.2f} / {np.percentile(x, 50):.2f} / {np.percentile(x, 90):.2f}" if x else "-"
                 for x in (self.latencies, shown)]
        return (f"| {setting(self.config)} | {stats[0]} | {stats[1]} "
                f"| {100 * sum(i.churn for i in self.items) / max(1, words):.1f} |")

    def health_row(self) -> str:
        worst = max(self.items, key=lambda i: i.wer() - i.offline_wer(), default=None)
        delta = f"{worst.wer() - worst.offline_wer():+.1f} ({worst.id})" if worst and worst.reference else "-"
        lost = sum(len(i.lost_words) for i in self.items)
        gated = sum(len(i.gated_words) for i in self.items)
        rep = health.repetition_cell([(i.repetition, i.offline_repetition) for i in self.items])
        stall = max(self.items, key=lambda i: i.max_delay_s, default=None)
        stall_s = f"{stall.max_delay_s:.2f} ({stall.id})" if stall else "-"
        return f"| {setting(self.config)} | {delta} " \
               f"| {lost} ({gated}) | {rep} | {stall_s} | {self.stall_bar_s:.2f} |"

    @property
    def stall_bar_s(self) -> float:
        """The longest commit delay a healthy stream stays within: 3 s beyond the setting's own
        delay (a step's audio plus the commit margin)."""
        return 3.0 + (self.config.chunk_ms + self.config.commit_margin_ms) / 1000

    def condition_rows(self) -> list[str]:
        groups: dict[str, list[ItemResult]] = {}
        for item in self.items:
            for cond in item.conditions:
                groups.setdefault(cond, []).append(item)
        rows = []
        for cond, items in sorted(groups.items(), key=lambda kv: -sum(i.audio_s for i in kv[1])):
            wer, off = _rate(items, "stream_errors"), _rate(items, "offline_errors")
            agree = 100.0 * sum(i.agreement_errors for i in items) / max(1, sum(i.offline_units for i in items))
            lat = [x for i in items for x in i.latencies]
            rows.append(f"| {cond} | {len(items)} | {sum(i.audio_s for i in items) / 60:.1f} | {wer:.2f} | {off:.2f} "
                        f"| {wer - off:+.2f} | {agree:.2f} | {np.mean(lat) if lat else float('nan'):.2f} "
                        f"| {max(i.wer() - i.offline_wer() for i in items):+.1f} |")
        return rows

    def spread_row(self) -> str | None:
        """The stream's items more than ``spread.WORSE_POINTS`` from offline beside those that offline 10 ms
        later has (:mod:`~susurrus.evaluation.spread`); None unless it was transcribed."""
        items = [i for i in self.items if i.reference is not None and i.shifted_errors is not None]
        if not items:
            return None
        worse, better = spread.counts([(i.wer(), i.offline_wer()) for i in items])
        s_worse, s_better = spread.counts([(i.shifted_wer(), i.offline_wer()) for i in items])
        return (f"| {setting(self.config)} | {len(items)} | {worse} / {better} | {s_worse} / {s_better} "
                f"| {_rate(items, 'shifted_errors'):.2f} | {_rate(items, 'offline_errors'):.2f} |")

    def worst_rows(self, n: int = 10) -> list[str]:
        ranked = sorted((i for i in self.items if i.reference is not None),
                        key=lambda i: i.wer() - i.offline_wer(), reverse=True)[:n]
        return [f"| {i.id} | {'; '.join(i.conditions)} | {i.wer():.1f} | {i.offline_wer():.1f} "
                f"| {_clip(i.stream_text)} | {_clip(i.offline_text)} |" for i in ranked]


def _rate(items: list[ItemResult], attr: str) -> float:
    labelled = [i for i in items if i.reference is not None]
    return 100.0 * sum(getattr(i, attr) for i in labelled) / max(1, sum(i.reference_units for i in labelled))


def _clip(text: str, n: int = 70) -> str:
    text = text.strip().replace("|", "/")
    return text if len(text) <= n else text[: n - 1] + "…"


def setting(c: StreamConfig) -> str:
    """A setting's label: chunk/look-ahead/margin ms, and the step phase when not 0."""
    label = f"{c.chunk_ms}/{lookahead_label(c)}/{c.commit_margin_ms}"
    return f"{label} phase {c.step_phase_ms}" if c.step_phase_ms else label


HEADER = ("| chunk ms | look-ahead ms | margin ms | policy | WER % | offline WER % | stream vs offline % "
          "| latency mean s | p50 s | p90 s | core-s / audio-s | re-encode core-s / audio-s | median step ms "
          "| peak RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
VIEWER_HEADER = ("| setting | committed latency mean / p50 / p90 s | shown in final form mean / p50 / p90 s "
                 "| churn per 100 words |\n|---|---|---|---|")
HEALTH_HEADER = ("| setting | worst item, WER points over offline | offline words lost to the gate (in skipped audio) "
                 "| longest repetition, stream (offline's; repeats kept; loops) "
                 "| longest commit delay s | its bar s (3 s + chunk + margin) |"
                 "\n|---|---|---|---|---|---|")
CONDITION_HEADER = ("| condition | items | minutes | stream WER % | offline WER % | Δ | stream vs offline % "
                    "| latency mean s | worst item Δ |\n|---|---|---|---|---|---|---|---|---|")
WORST_HEADER = "| item | condition | stream WER % | offline WER % | stream | offline |\n|---|---|---|---|---|---|"


def stream_item(net, tokenizer, audio: np.ndarray, config: StreamConfig,
                silence=None, vad=None, display: Display | None = None) -> tuple[StreamSession, float]:
    """Stream ``audio`` in chunk-sized pieces; returns the session and its CPU seconds (the
    voice activity detector included). ``display`` follows what a viewer sees."""
    session = StreamSession(net, tokenizer, config, silence, vad)
    block = config.chunk_ms * 16
    display = display or Display()
    c0 = time.process_time()
    for i in range(0, len(audio), block):
        display.watch(session.feed(audio[i:i + block]), session.audio_time)
    display.watch(session.finish(), session.audio_time)
    return session, time.process_time() - c0


def stream_together(model, audios: list[np.ndarray], configs: list[StreamConfig], silence=None,
                    vad=None, displays: list[Display] | None = None) -> list[tuple[StreamSession, float]]:
    """Stream ``audios`` at once, stepped together (:class:`~susurrus.streaming.batch.StreamBatch`),
    each in chunk-sized pieces; the sessions and each one's share of the CPU seconds (by audio
    length)."""
    from susurrus.streaming.batch import StreamBatch

    batch = StreamBatch(model)
    sessions = [StreamSession(model.net, model.tokenizer, cfg, silence, vad) for cfg in configs]
    block = configs[0].chunk_ms * 16
    shown = dict(zip(sessions, displays or [Display() for _ in sessions]))

    def watch(events: dict) -> None:
        for s, evs in events.items():
            shown[s].watch(evs, s.audio_time)
    c0 = time.process_time()
    for i in range(0, max(len(a) for a in audios), block):
        watch(batch.feed({s: a[i:i + block] for s, a in zip(sessions, audios) if i < len(a)}))
    watch(batch.finish(sessions))
    cpu = time.process_time() - c0
    total = sum(len(a) for a in audios)
    return [(s, cpu * len(a) / total) for s, a in zip(sessions, audios)]


def _full_encode_s(net, audio: np.ndarray) -> float:
    """CPU seconds of one padded 30 s encode (median of three after a warm-up), as tools that
    transcribe windows again pay at every step: the bench's unit of cost. Measured once per
    model in a process (kept on the network, as its silence encoding is), not per run."""
    if getattr(net, "bench_full_encode_s", None) is None:
        mel, times = pad_or_trim(log_mel_spectrogram(audio)[:, :N_FRAMES])[None], []
        with torch.inference_mode():
            for k in range(4):  # (the first: warm-up)
                c0 = time.process_time()
                net.embed_audio(mel)
                times += [time.process_time() - c0] if k else []
        net.bench_full_encode_s = statistics.median(times)
    return net.bench_full_encode_s


def run(model, items: list[Item], configs: list[StreamConfig], progress: bool = True,
        detect_language: bool = False, offline_cache: str | None = None, together: int = 1,
        offline_spread: bool = False) -> list[BenchResult]:
    """Stream and transcribe ``items`` with each setting. The item's language is given to both
    unless ``detect_language`` (multilingual models then detect it, offline and streaming).
    ``offline_cache``: a JSON file keeping the offline transcriptions between runs (keyed by
    model, item, audio length and language; delete it when the offline decoding changes).
    ``together``: stream that many items at once, stepped together (their cost is the group's,
    shared by audio length). ``offline_spread``: also transcribe every item offline 10 ms later
    (:mod:`~susurrus.evaluation.spread`), for the noise floor of the per-item comparison."""
    net, tokenizer = model.net, model.tokenizer
    audio = {}
    for item in items:  # all read first: a file that is not audio fails before any work
        try:
            audio[item.id] = decode_audio(item.audio)
        except Exception as err:
            raise AudioError(f"{item.audio}: not readable audio ({err})") from err

    def language(item: Item) -> str | None:
        return None if detect_language or not model.is_multilingual else item.language

    cache = load_offline_cache(offline_cache)
    offline: dict[str, tuple[str, list[Word]]] = {}
    for item in tqdm(items, desc="offline reference", disable=not progress, file=sys.stderr):
        offline[item.id] = cached_offline(model, cache, item.id, audio[item.id], language(item))
    later = {item.id: cached_offline(model, cache, item.id, audio[item.id], language(item), spread.SHIFT_SAMPLES)[0]
             for item in tqdm(items, desc="offline 10 ms later", disable=not progress, file=sys.stderr)
             } if offline_spread else {}
    if offline_cache:
        with open(offline_cache, "w") as f:
            json.dump(cache, f)
    full_encode_s = _full_encode_s(net, audio[items[0].id])
    silence = silence_cross_kv(net)  # shared by every stream, as a server would
    vad = load_vad()
    results = []
    for config in configs:
        if not model.is_multilingual:  # English only: the look-ahead English sets, in the tables
            config = replace(config, lookahead_ms=lookahead_for(config, "en"))
        res = BenchResult(config=config, full_encode_s=full_encode_s)
        groups = [items[i:i + together] for i in range(0, len(items), max(1, together))]
        bar = tqdm(total=len(items), desc=f"stream {setting(config)}",
                   disable=not progress, file=sys.stderr)
        for group in groups:
            cfgs = [config if language(item) is None else _with_language(config, language(item)) for item in group]
            displays = [Display() for _ in group]
            if len(group) == 1:
                done = [stream_item(net, tokenizer, audio[group[0].id], cfgs[0], silence, vad, displays[0])]
            else:
                done = stream_together(model, [audio[item.id] for item in group], cfgs, silence, vad, displays)
            for item, (session, cpu), display in zip(group, done, displays):
                if len(group) == 1:
                    res.step_times.extend(s.compute_s for s in session.stats)
                res.items.append(score_item(item, session, offline[item.id], len(audio[item.id]) / 16000, cpu,
                                            display))
                if item.id in later:
                    res.items[-1].shifted_text = later[item.id]
                    if item.text:
                        res.items[-1].shifted_errors = error_counts(item.text, later[item.id], item.language,
                                                                    unit_for(item.language))[0]
            bar.update(len(group))
        bar.close()
        res.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        results.append(res)
    return results


def _with_language(config: StreamConfig, language: str) -> StreamConfig:
    from dataclasses import replace

    return replace(config, language=language)


def score_item(item: Item, session: StreamSession, offline: tuple[str, list[Word]], audio_s: float,
               cpu_s: float, display: Display | None = None) -> ItemResult:
    offline_text, offline_words = offline
    unit = unit_for(item.language)
    res = ItemResult(item.id, item.language, item.conditions, audio_s, item.text or None, session.text, offline_text,
                     cpu_s=cpu_s, steps=len(session.stats))
    if item.text:
        res.stream_errors, res.reference_units = error_counts(item.text, session.text, item.language, unit)
        res.offline_errors, _ = error_counts(item.text, offline_text, item.language, unit)
    res.agreement_errors, res.offline_units = error_counts(offline_text, session.text, item.language, unit)
    res.latencies = word_latencies(session.words, offline_words)
    if display is not None and unit == "word":  # (a guess in zh or ja has no word boundaries)
        res.shown_latencies = word_latencies(session.words, offline_words, display.first_shown(session.words))
        res.churn, res.words = display.churn, len(session.words)
    res.repetition = health.longest_repetition([w.word for w in session.words])
    res.offline_repetition = health.longest_repetition(offline_text.split())
    delays = health.commit_delays(session.words, offline_words, audio_s, language=item.language, unit=unit)
    res.max_delay_s = round(max(delays, default=0.0), 3)
    res.gated_words = [w.word for w in health.gated_words(offline_words, session.skipped)]
    res.lost_words = [w.word for w in health.lost_words(offline_words, session.skipped, session.words, item.language,
                                                        unit)]
    return res


PHASE_HEADER = ("| setting | phases ms | WER % per phase | mean WER % | offline WER % | items > 15 points worse than "
                "offline, per phase | at every phase | at some phase | texts unlike the first phase's |\n"
                "|---|---|---|---|---|---|---|---|---|")


def phase_rows(results: list[BenchResult]) -> list[str]:
    """For each setting run at several step phases (``--phases``): how far the phase alone moves
    the WER, the items more than 15 points worse than offline, and the texts."""
    groups: dict[StreamConfig, list[BenchResult]] = {}
    for r in results:
        groups.setdefault(replace(r.config, step_phase_ms=0), []).append(r)
    rows = []
    for base, runs in groups.items():
        if len(runs) < 2:
            continue
        worse = [{i.id for i in r.items if i.reference and i.wer() - i.offline_wer() > spread.WORSE_POINTS}
                 for r in runs]
        first = {i.id: i.stream_text for i in runs[0].items}
        unlike = [sum(i.stream_text != first.get(i.id) for i in r.items) for r in runs[1:]]
        wers = [r.wer for r in runs]
        rows.append(f"| {setting(base)} | {', '.join(str(r.config.step_phase_ms) for r in runs)} "
                    f"| {' / '.join(f'{w:.2f}' for w in wers)} | {statistics.mean(wers):.2f} "
                    f"| {runs[0].offline_wer:.2f} "
                    f"| {' / '.join(str(len(w)) for w in worse)} | {len(set.intersection(*worse))} "
                    f"| {len(set.union(*worse))} | {' / '.join(str(u) for u in unlike)} of {len(runs[0].items)} |")
    return rows


def report(results: list[BenchResult], worst: int = 10) -> str:
    """The tables: settings, health, step phases (if several), per condition and worst items
    (per setting)."""
    lines = [HEADER, *(r.row() for r in results), "", HEALTH_HEADER, *(r.health_row() for r in results)]
    lines += ["", "What a viewer sees: a word first on screen in its final form (committed, or at its place in "
                  "the interim guess), in s after its end; churn: words on screen replaced or taken back, per 100 "
                  "committed words:", "", VIEWER_HEADER, *(r.viewer_row() for r in results)]
    phases = phase_rows(results)
    if phases:
        lines += ["", "Step phases (the same setting, its steps falling elsewhere in the audio):", "", PHASE_HEADER,
                  *phases]
    for r in results:
        c = r.config
        lines += ["", f"Per condition, {setting(c)} "
                      "(an item counts in each of its conditions):", "", CONDITION_HEADER, *r.condition_rows()]
        if worst:
            lines += ["", f"Worst {worst} items (stream minus offline WER):", "", WORST_HEADER, *r.worst_rows(worst)]
    lines += ["", "The edges of the text (susurrus/evaluation/edges.py): the first words against offline's, and "
                  "the last word:", "", edges.HEADER, *(edges.row(setting(r.config), r.items) for r in results)]
    spreads = [row for r in results if (row := r.spread_row())]
    if spreads:
        lines += ["", "The per-item comparison's noise floor: offline over the same audio 10 ms later (one mel "
                      "frame of digital silence before it) against offline:", "", spread.HEADER, *spreads]
    return "\n".join(lines)


def write_json(results: list[BenchResult], path: str) -> None:
    """Every item's texts and figures, per setting."""
    out = [{"config": asdict(r.config), "wer": r.wer, "offline_wer": r.offline_wer, "agreement": r.agreement,
            "latency_mean": r.mean_latency, "cost": r.cost, "items": [asdict(i) for i in r.items]} for r in results]
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)


def plot(results: list[BenchResult], path: str) -> None:
    """WER versus mean latency, one point per setting (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r.mean_latency for r in results]
    ys = [r.wer for r in results]
    ax.plot(xs, ys, "o-", label="susurrus streaming")
    for r, x, y in zip(results, xs, ys):
        ax.annotate(f"{setting(r.config)} ms", (x, y),
                    textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.axhline(results[0].offline_wer, color="gray", ls="--", label="same model offline")
    ax.set_xlabel("mean word latency (s, audio time)")
    ax.set_ylabel("WER (%)")
    ax.set_title("WER versus latency (chunk / look-ahead / margin)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
