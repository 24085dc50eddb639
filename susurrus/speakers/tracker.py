"""Who is speaking, per stream: embeddings of the voiced audio at a fixed hop, clustered online,
and each committed word's speaker, decided once when the word is committed.

Every hop (the encoder's ``hop_s`` in ``settings.ENCODER_SPECS``: 1 s for CAM++, 0.5 s for
GE2E) the 1.6 s ending there is embedded when at least half of its VAD frames are speech (the
stream's Silero VAD; without one, frames above an energy floor); after a window with less, the
next is tried ``RETRY`` later. Speakers come from
clustering every window again (CAM++, ``cluster.Reclustered``) or window by window (GE2E,
``cluster.OnlineClusters``). A committed word takes the speaker most of the windows centred on
it were assigned (a window's middle ``CENTRE_S``, or the hop if longer, the part whose speaker
it best tells, weighted by overlap with the word); with none near it, the nearest window's.
Labels are ``S1``, ``S2``, ... in the order speakers first get a word, or an enrolled speaker's
name. Due windows wait for a batch of ``BATCH`` through the encoder unless a word needs a label
(then they go at once: a label never waits). The state is bounded: at most 240 windows
clustered (CAM++) or per speaker a sum, a count and its last 64 embeddings (GE2E), the last
``KEEP_S`` seconds of windows, 2.6 s of audio and at most ``BATCH - 1`` waiting windows
(``keep_all`` keeps every window's embedding, for offline clustering of the same embeddings)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from susurrus.speakers.cluster import (
    PENDING,
    SPLIT_RUN,
    OnlineClusters,
    Reclustered,
    SpeakerConfig,
    cluster_offline,
)
from susurrus.speakers.encoder import PARTIAL_SAMPLES, SAMPLE_RATE, embed_partials
from susurrus.speakers.settings import ENCODER_SPECS

# the hop between windows and how speakers are found are the encoder's (settings.ENCODER_SPECS):
# CAM++'s window a second costs ~+10 % of a tiny.en stream's CPU on continuous speech where OpenVINO
# runs it in bfloat16 (Intel AMX), +19-25 % in float32 (docs/benchmarks.md, "Speakers"; a 1.5 s
# hop cost the bars)
CENTRE_S = 0.8
KEEP_S = 60.0  # windows kept for labelling words (a word commits within seconds of its end)
VOICED = 0.5  # a window is embedded when this fraction of its frames is speech
RETRY = int(0.25 * SAMPLE_RATE)  # after a window with too little speech, the next one ends this much later
# windows wait until this many are due or a word needs a label, then go through the encoder as
# one batch (on ONNX Runtime a batch of 4 costs ~15-30 % less a window than one at a time;
# OpenVINO runs them one at a time, runtime.OpenVinoNetwork; a label never waits)
BATCH = 4
GROUP = SPLIT_RUN  # consecutive windows (2 s of GE2E's speech) that may open a speaker inside another's

Voiced = Callable[[float, float], float | None]  # (start_s, end_s) -> fraction of speech frames


@dataclass
class Window:
    start: float
    end: float
    cluster: int
    embedding: np.ndarray


def energy_voiced(audio: np.ndarray, start_s: float, end_s: float) -> float:
    """Fraction of 32 ms frames within 40 dB of the window's loudest (no VAD)."""
    x = audio[int(start_s * SAMPLE_RATE): int(end_s * SAMPLE_RATE)]
    n = len(x) // 512
    if n == 0:
        return 0.0
    rms = np.sqrt((x[: n * 512].reshape(n, 512) ** 2).mean(1)) + 1e-9
    return float(np.mean((rms > 1e-3) & (rms > rms.max() * 0.01)))


class SpeakerTracker:
    def __init__(self, config: SpeakerConfig | None = None, refs: dict[str, np.ndarray] | None = None,
                 keep_all: bool = False) -> None:
        self.config = config or SpeakerConfig()
        self.clusters = OnlineClusters(self.config)
        for name, emb in (refs or {}).items():
            self.clusters.enrol(name, emb)
        self.refs = dict(refs or {})
        spec = ENCODER_SPECS[self.config.encoder]
        self.hop = int(spec.hop_s * SAMPLE_RATE)
        self.centre_s = max(CENTRE_S, spec.hop_s)  # windows' middles tile the speech
        self.reclustered = Reclustered(self.config, list(self.refs.values())) if spec.recluster else None
        self.windows: deque[Window] = deque(maxlen=int(KEEP_S * SAMPLE_RATE / self.hop))
        self.all: list[Window] | None = [] if keep_all else None
        self.audio = np.zeros(0, np.float32)  # the last samples, ending at ``samples``
        self.samples = 0
        self.next_end = PARTIAL_SAMPLES
        self.labels: dict[int, str] = {}
        self.embedded = 0
        self.batches = 0
        self.queue: list[tuple[float, float, np.ndarray]] = []  # windows due, not embedded yet

    def push(self, samples: np.ndarray, voiced: Voiced | None = None) -> None:
        """Audio fed to the stream (16 kHz float32); ``voiced`` reads the stream's VAD."""
        keep = PARTIAL_SAMPLES + 2 * self.hop + len(samples)
        self.audio = np.concatenate([self.audio, np.asarray(samples, np.float32)])[-keep:]
        self.samples += len(samples)
        while self.next_end <= self.samples:
            end = self.next_end
            self.next_end += self.hop
            a, b = (end - PARTIAL_SAMPLES) / SAMPLE_RATE, end / SAMPLE_RATE
            off = len(self.audio) - (self.samples - end)
            piece = self.audio[max(0, off - PARTIAL_SAMPLES): off]
            frac = voiced(a, b) if voiced is not None else None
            if frac is None:
                frac = energy_voiced(piece, 0.0, len(piece) / SAMPLE_RATE)
            if frac >= VOICED and len(piece) == PARTIAL_SAMPLES:
                self.queue.append((a, b, piece.copy()))
            else:  # too little speech yet: look again soon, so a turn's first window is not a hop late
                self.next_end = end + RETRY
        if len(self.queue) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Embed and assign the windows waiting in the queue (one batch through the encoder)."""
        if self.queue:
            due, self.queue = self.queue, []
            self._add(due)

    def _add(self, due: list[tuple[float, float, np.ndarray]]) -> None:
        embs = embed_partials([p for _, _, p in due], encoder=self.config.encoder)
        self.embedded += len(due)
        self.batches += 1
        for (a, b, _), e in zip(due, embs, strict=True):
            if self.reclustered is not None:  # its clustering, when labels are asked for, gives the speaker
                w = Window(a, b, PENDING, e)
                self.reclustered.add(w)
            else:
                k, settled = self.clusters.assign(e)
                if settled is not None:
                    for earlier in reversed(self.windows):
                        if earlier.cluster == PENDING:
                            earlier.cluster = settled
                            break
                w = Window(a, b, k, e)
            self.windows.append(w)
            if self.all is not None:
                self.all.append(w)
            if self.reclustered is None and w.cluster != PENDING:
                self._split(w.cluster)

    def _split(self, k: int) -> None:
        """The last ``GROUP`` windows, consecutive and all given to speaker ``k``: another voice
        when the clusters say so (:meth:`OnlineClusters.split_off`); then they take the new
        speaker (words already labelled keep their labels: decided once)."""
        run = list(self.windows)[-GROUP:]
        if len(run) < GROUP or any(w.cluster != k for w in run):
            return
        if run[-1].start - run[0].start > (GROUP - 1) * self.hop / SAMPLE_RATE + 1e-6:  # not consecutive
            return
        j = self.clusters.split_off(k, np.stack([w.embedding for w in run]))
        if j is not None:
            for w in run:
                w.cluster = j

    # ------------------------------------------------------------------ labels

    def _cluster_of(self, start: float, end: float, windows: Sequence[Window], ids: Sequence[int]) -> int | None:
        if end - start < 0.3:
            mid = (start + end) / 2
            start, end = mid - 0.15, mid + 0.15
        votes: dict[int, float] = {}
        half = self.centre_s / 2
        for w, k in zip(windows, ids, strict=True):
            mid = (w.start + w.end) / 2
            overlap = min(end, mid + half) - max(start, mid - half)
            if overlap > 0:
                votes[k] = votes.get(k, 0.0) + overlap
        if votes:
            return max(votes, key=votes.get)
        if not windows:
            return None
        mids = np.array([(w.start + w.end) / 2 for w in windows])
        return ids[int(np.argmin(np.abs(mids - (start + end) / 2)))]

    def _name(self, k: int | None, names: dict[int, str], ref_names: Sequence[str | None]) -> str:
        if k is None:
            return next(iter(names.values()), "S1") if names else "S1"
        if k not in names:
            named = ref_names[k] if k < len(ref_names) else None
            names[k] = named or f"S{sum(1 for v in names.values() if v not in self.refs) + 1}"
        return names[k]

    def label(self, spans: Sequence[tuple[float, float]]) -> list[str]:
        """The speaker of each word span (start, end), in the stream's labels; decided now."""
        if not spans:
            return []
        self.flush()
        if self.reclustered is not None:
            self.reclustered.update()
            wins = [w for w in self.windows if w.cluster != PENDING]
            ids = [w.cluster for w in wins]
            return [self._name(self._cluster_of(s, e, wins, ids), self.labels, list(self.refs)) for s, e in spans]
        wins = list(self.windows)
        ids = [w.cluster if w.cluster != PENDING else self.clusters.nearest(w.embedding) for w in wins]
        return [self._name(self._cluster_of(s, e, wins, ids), self.labels, self.clusters.names) for s, e in spans]

    def label_offline(self, spans: Sequence[tuple[float, float]]) -> list[str]:
        """Word speakers from agglomerative clustering of every window (``keep_all``)."""
        if self.all is None:
            raise RuntimeError("label_offline needs a tracker made with keep_all=True")
        self.flush()
        refs = list(self.refs.values())
        ids = list(cluster_offline(np.stack([w.embedding for w in self.all]) if self.all else np.zeros((0, 1)),
                                   self.config, refs))
        names: dict[int, str] = {}
        ref_names = list(self.refs)
        return [self._name(self._cluster_of(s, e, self.all, ids), names, ref_names) for s, e in spans]

    @property
    def speakers_found(self) -> int:
        self.flush()
        if self.reclustered is not None:
            self.reclustered.update()
            return self.reclustered.speakers
        return len(self.clusters.sums)
