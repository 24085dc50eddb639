"""Streaming benchmark: accuracy, latency and cost of the live engine on a manifest.

Every item is streamed in simulated real time (the audio is fed in ``chunk_ms`` pieces, as a
live source would deliver it; latency is algorithmic, in audio time). Reported:

* WER of the committed text (Whisper's English normaliser), beside the same model offline
  (greedy, 30 s windows) on the same items;
* per-word latency: ``emitted_at`` minus the word's end time, the end taken from the same
  model's offline word timestamps and matched to committed words by alignment;
* core-seconds per audio-second (process CPU time, 1 thread unless told), the median compute
  time of one step, peak RSS; and the cost of re-encoding the whole padded 30 s buffer at
  every step (what window-re-transcribing tools do), measured in the same run.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from susurrus.audio.features import N_FRAMES, log_mel_spectrogram, pad_or_trim
from susurrus.audio.io import decode_audio
from susurrus.evaluation.alignment import align_words, normalized_words
from susurrus.evaluation.data import Item
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.session import StreamConfig, StreamSession, silence_cross_kv
from susurrus.streaming.vad import load_vad
from susurrus.types import Word


@dataclass
class BenchResult:
    config: StreamConfig
    items: int = 0
    audio_s: float = 0.0
    wer: float = 0.0
    offline_wer: float = 0.0
    latencies: list[float] = field(default_factory=list)
    stream_cpu_s: float = 0.0
    step_times: list[float] = field(default_factory=list)
    steps: int = 0
    full_encode_s: float = 0.0  # one padded 30 s encode, CPU seconds (median)
    peak_rss_mb: float = 0.0
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def cost(self) -> float:
        return self.stream_cpu_s / max(self.audio_s, 1e-9)

    @property
    def reencode_cost(self) -> float:
        return self.steps * self.full_encode_s / max(self.audio_s, 1e-9)

    def latency(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")

    @property
    def mean_latency(self) -> float:
        return float(np.mean(self.latencies)) if self.latencies else float("nan")

    def row(self) -> str:
        c = self.config
        return (f"| {c.chunk_ms} | {c.lookahead_ms} | {c.commit_margin_ms} | {c.policy} | {self.wer:.2f} "
                f"| {self.offline_wer:.2f} | {self.mean_latency:.2f} | {self.latency(50):.2f} "
                f"| {self.latency(90):.2f} | {self.cost:.3f} | {self.reencode_cost:.2f} "
                f"| {1000 * statistics.median(self.step_times):.0f} | {self.peak_rss_mb:.0f} |")


HEADER = ("| chunk ms | look-ahead ms | margin ms | policy | WER % | offline WER % | latency mean s "
          "| p50 s | p90 s | core-s / audio-s | re-encode core-s / audio-s | median step ms | peak RSS MB |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def stream_item(net, tokenizer, audio: np.ndarray, config: StreamConfig,
                silence=None, vad=None) -> tuple[StreamSession, float]:
    """Stream ``audio`` in chunk-sized pieces; returns the session and its CPU seconds (the
    voice activity detector included)."""
    session = StreamSession(net, tokenizer, config, silence, vad)
    block = config.chunk_ms * 16
    c0 = time.process_time()
    for i in range(0, len(audio), block):
        session.feed(audio[i:i + block])
    session.finish()
    return session, time.process_time() - c0


def word_latencies(stream_words, offline_words: list[Word]) -> list[float]:
    """emitted_at minus the offline end time of the same word, for words both agree on."""
    hyp_tokens, hyp_owner = normalized_words(stream_words)
    ref_tokens, ref_owner = normalized_words(offline_words)
    out = []
    last = -1
    for r, h in align_words(ref_tokens, hyp_tokens):
        if hyp_owner[h] == last:
            continue  # one latency per stream word
        last = hyp_owner[h]
        out.append(stream_words[hyp_owner[h]].emitted_at - offline_words[ref_owner[r]].end)
    return out


def run(model, items: list[Item], configs: list[StreamConfig], progress: bool = True) -> list[BenchResult]:
    net, tokenizer = model.net, model.tokenizer
    audio = {i.id: decode_audio(i.audio) for i in items}
    offline_text: dict[str, str] = {}
    offline_words: dict[str, list[Word]] = {}
    for item in tqdm(items, desc="offline reference", disable=not progress, file=sys.stderr):
        segments, _ = model.transcribe(audio[item.id], beam_size=1, temperature=0.0, word_timestamps=True,
                                       language="en" if model.is_multilingual else None)
        segments = list(segments)
        offline_text[item.id] = " ".join(s.text.strip() for s in segments)
        offline_words[item.id] = [w for s in segments for w in s.words or []]
    # the cost of one padded 30 s encode, as window-re-transcribing tools pay at every step
    mel = pad_or_trim(log_mel_spectrogram(audio[items[0].id])[:, :N_FRAMES])[None]
    times = []
    with torch.inference_mode():
        net.embed_audio(mel)
        for _ in range(3):
            c0 = time.process_time()
            net.embed_audio(mel)
            times.append(time.process_time() - c0)
    full_encode = statistics.median(times)
    silence = silence_cross_kv(net)  # shared by every stream, as a server would
    vad = load_vad()
    results = []
    for config in configs:
        res = BenchResult(config=config, items=len(items), full_encode_s=full_encode)
        pairs, offline_pairs = [], []
        for item in tqdm(items, desc=f"stream {config.chunk_ms}/{config.lookahead_ms}/{config.commit_margin_ms}",
                         disable=not progress, file=sys.stderr):
            session, cpu = stream_item(net, tokenizer, audio[item.id], config, silence, vad)
            res.audio_s += len(audio[item.id]) / 16000
            res.stream_cpu_s += cpu
            res.steps += len(session.stats)
            res.step_times.extend(s.compute_s for s in session.stats)
            res.texts[item.id] = session.text
            pairs.append((item.text, session.text))
            offline_pairs.append((item.text, offline_text[item.id]))
            res.latencies.extend(word_latencies(session.words, offline_words[item.id]))
        res.wer = corpus_error_rate(pairs)
        res.offline_wer = corpus_error_rate(offline_pairs)
        res.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        results.append(res)
    return results


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
        ax.annotate(f"{r.config.chunk_ms}/{r.config.lookahead_ms}/{r.config.commit_margin_ms} ms", (x, y),
                    textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.axhline(results[0].offline_wer, color="gray", ls="--", label="same model offline")
    ax.set_xlabel("mean word latency (s, audio time)")
    ax.set_ylabel("WER (%)")
    ax.set_title("WER versus latency (chunk / look-ahead / margin)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
