"""Clustering speaker embeddings: online (a stream: bounded state, decisions never revisited)
and offline (a whole file: agglomerative, the reference the stream is compared with).

Embeddings are unit vectors; similarity is their dot product (cosine). GE2E's ReLU output makes
every similarity >= 0. One threshold decides "same speaker": :data:`SAME_SPEAKER`, the
equal-error point of same- and different-speaker pairs of 1.6 s partials measured over the
speakers of the shared data (40 speakers, 272 partials: 0.582, EER 7.9 %; ``python -m
susurrus.speakers.threshold`` measures it again). Average linkage compares mean pairwise
similarities, so the pairs' equal-error point is its natural cut. The stream compares an
embedding with a centroid (a mean: its noise averaged out, it is nearer to everything), so it has
its own bar, :data:`SAME_CENTROID`, the equal-error point of embeddings against the centroid of 8
other embeddings of the same or of another speaker (the same script). With the pairs' bar there
the stream merged speakers: 2-speaker DER 22.9 %, 3-speaker 36.2 %, the count right on 4/8 and
1/6 (docs/benchmarks.md, "Speakers")."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_SPECS

# GE2E's two thresholds (the module docstring; every encoder's: settings.ENCODER_SPECS)
SAME_SPEAKER = ENCODER_SPECS["ge2e"].same_pair  # measured: 0.582, EER 7.9 %
SAME_CENTROID = ENCODER_SPECS["ge2e"].same_centroid  # measured: 0.684, EER 1.0 %
PENDING = -1
# a run of this many windows given to one speaker may be another voice (OnlineClusters'
# split test); fewer that re-clustering cuts off a known speaker stay that speaker (Reclustered)
SPLIT_RUN = 4


@dataclass
class SpeakerConfig:
    """``speakers``: exactly that many (None: unknown); ``min_speakers`` / ``max_speakers``
    bound the count (past ``max`` a new voice is merged into the nearest speaker); ``threshold``:
    the similarity at or above which two embeddings (or clusters, offline) are one speaker;
    ``centroid_threshold``: an embedding and a speaker's centroid (the stream); both default to
    the ``encoder``'s measured values (``settings.ENCODER_SPECS``)."""

    speakers: int | None = None
    min_speakers: int = 1
    max_speakers: int | None = None
    threshold: float | None = None
    centroid_threshold: float | None = None
    encoder: str = DEFAULT_ENCODER

    def __post_init__(self) -> None:
        if self.encoder not in ENCODER_SPECS:
            raise ValueError(f"unknown speaker encoder {self.encoder!r}: one of {', '.join(ENCODER_SPECS)}")
        spec = ENCODER_SPECS[self.encoder]
        self.threshold = spec.same_pair if self.threshold is None else self.threshold
        self.centroid_threshold = spec.same_centroid if self.centroid_threshold is None else self.centroid_threshold
        if self.speakers is not None:
            if self.speakers < 1:
                raise ValueError(f"speakers must be at least 1, got {self.speakers}")
            self.min_speakers = self.max_speakers = self.speakers
        if self.min_speakers < 1:
            raise ValueError(f"min_speakers must be at least 1, got {self.min_speakers}")
        if self.max_speakers is not None and self.max_speakers < self.min_speakers:
            raise ValueError(f"max_speakers ({self.max_speakers}) is below min_speakers ({self.min_speakers})")


@dataclass
class OnlineClusters:
    """Centroids (sums of unit embeddings) and counts: the whole state, flat however long the
    stream. A new speaker opens only when two consecutive embeddings agree with each other and
    with no speaker (one embedding that fits nobody is usually a window across a change of
    speaker, or a cough); until the count reaches ``min_speakers`` the bar for "fits nobody" is
    lowered by ``MIN_MARGIN``.

    That test compares one window with one global bar, and a second voice close to the first (two
    children: 0.55-0.65 between them, 0.8-0.9 within each) is half the time over it, so it is
    taken into the first speaker window by window and never opens. :meth:`split_off` decides
    from more evidence: a run of ``GROUP`` consecutive windows that agree with each other, held
    against the speaker's own statistics (its last ``MEMBERS`` windows' similarity to its
    centroid) instead of the global bar; a run more than ``SPLIT_Z`` standard deviations below
    them is another voice, and opens a speaker."""

    config: SpeakerConfig
    sums: list[np.ndarray] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)
    pending: np.ndarray | None = None  # the last embedding that fitted nobody
    members: list[deque] = field(default_factory=list)  # each speaker's last MEMBERS embeddings

    MIN_MARGIN = 0.1
    MEMBERS = 64
    SPLIT_Z = 5.0

    def enrol(self, name: str, embedding: np.ndarray, weight: int = 4) -> None:
        self.sums.append(embedding * weight)
        self.counts.append(weight)
        self.names.append(name)
        self.members.append(deque(maxlen=self.MEMBERS))

    def centroids(self) -> np.ndarray:
        if not self.sums:
            return np.zeros((0, len(self.pending) if self.pending is not None else 0), np.float32)
        c = np.stack(self.sums)
        return c / np.linalg.norm(c, axis=1, keepdims=True)

    def _add(self, k: int, e: np.ndarray) -> int:
        self.sums[k] = self.sums[k] + e
        self.counts[k] += 1
        self.members[k].append(e)
        return k

    def _open(self, e: np.ndarray) -> int:
        self.sums.append(e.copy())
        self.counts.append(1)
        self.names.append(None)
        self.members.append(deque([e], maxlen=self.MEMBERS))
        return len(self.sums) - 1

    def assign(self, e: np.ndarray) -> tuple[int, int | None]:
        """The speaker of embedding ``e`` (PENDING while it may open a new one), and the earlier
        pending embedding's speaker if this decision settled it (else None)."""
        cfg, n = self.config, len(self.sums)
        if n == 0:
            return self._open(e), None
        sims = self.centroids() @ e
        best = int(np.argmax(sims))
        full = cfg.max_speakers is not None and n >= cfg.max_speakers
        bar = cfg.centroid_threshold + (self.MIN_MARGIN if n < cfg.min_speakers else 0.0)
        prev, self.pending = self.pending, None
        if sims[best] >= bar or full:
            settled = self._add(int(np.argmax(self.centroids() @ prev)), prev) if prev is not None else None
            return self._add(best, e), settled
        if prev is not None and float(prev @ e) >= cfg.threshold:
            k = self._open(prev)
            return self._add(k, e), k
        settled = self._add(int(np.argmax(self.centroids() @ prev)), prev) if prev is not None else None
        self.pending = e
        return PENDING, settled

    def nearest(self, e: np.ndarray) -> int:
        return int(np.argmax(self.centroids() @ e))

    def split_off(self, k: int, run: np.ndarray) -> int | None:
        """``run``: the last embeddings given to speaker ``k``, consecutive windows. When they
        agree with each other (every pair at the same-speaker threshold) and their mean is more
        than ``SPLIT_Z`` standard deviations below the similarity of the speaker's earlier
        windows (at least two runs' worth) to the centroid without them, they move to a new
        speaker, whose index is returned; else None (and nothing changes)."""
        cfg, m = self.config, self.members[k]
        g = len(run)
        if len(m) < 3 * g or (cfg.max_speakers is not None and len(self.sums) >= cfg.max_speakers):
            return None
        if float((run @ run.T).min()) < cfg.threshold:
            return None
        rest = self.sums[k] - run.sum(0)
        rest = rest / np.linalg.norm(rest)
        own = np.stack(list(m)[:-g]) @ rest
        mean = run.mean(0)
        if float(mean @ rest) / float(np.linalg.norm(mean)) >= own.mean() - self.SPLIT_Z * own.std():
            return None
        self.sums[k] = self.sums[k] - run.sum(0)
        self.counts[k] -= g
        for _ in range(g):
            m.pop()
        j = self._open(run[0])
        for e in run[1:]:
            self._add(j, e)
        return j


def cluster_offline(embeddings: np.ndarray, config: SpeakerConfig, refs: list[np.ndarray] | None = None) -> np.ndarray:
    """Speaker index per embedding, from agglomerative clustering (average linkage, cosine
    distance) cut at ``1 - threshold`` and brought within ``[min, max]``; enrolled references
    (``refs``) take indices ``0..len(refs)-1`` (each cluster joins its nearest reference when
    it is that similar). Clusters of a single embedding join their nearest neighbour."""
    from scipy.cluster.hierarchy import fcluster, linkage

    n = len(embeddings)
    if n == 0:
        return np.zeros(0, int)
    if n == 1:
        labels = np.zeros(1, int)
    else:
        tree = linkage(embeddings, method="average", metric="cosine")
        labels = fcluster(tree, 1.0 - config.threshold, criterion="distance") - 1
        k = len(set(labels))
        lo, hi = config.min_speakers, config.max_speakers or n
        if not lo <= k <= hi:
            labels = fcluster(tree, min(max(k, lo), hi, n), criterion="maxclust") - 1
        labels = _absorb_singletons(embeddings, labels)
    return _match_refs(embeddings, labels, refs or [], config.threshold)


def _means(embeddings: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.unique(labels)
    m = np.stack([embeddings[labels == i].mean(0) for i in ids])
    return ids, m / np.linalg.norm(m, axis=1, keepdims=True)


def _absorb_singletons(embeddings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    ids, counts = np.unique(labels, return_counts=True)
    big = ids[counts > 1]
    if len(big) == 0 or len(big) == len(ids):
        return labels
    bids, means = _means(embeddings[np.isin(labels, big)], labels[np.isin(labels, big)])
    out = labels.copy()
    for i in ids[counts == 1]:
        j = np.flatnonzero(labels == i)[0]
        out[j] = bids[int(np.argmax(means @ embeddings[j]))]
    return out


def _match_refs(embeddings: np.ndarray, labels: np.ndarray, refs: list[np.ndarray], threshold: float) -> np.ndarray:
    """Renumber: clusters that match a reference take its index, the rest follow."""
    ids, means = _means(embeddings, labels)
    mapping: dict[int, int] = {}
    if refs:
        sims = means @ np.stack(refs).T
        for i, cid in enumerate(ids):
            j = int(np.argmax(sims[i]))
            if sims[i, j] >= threshold and j not in mapping.values():
                mapping[int(cid)] = j
    nxt = len(refs)
    for cid in ids:
        if int(cid) not in mapping:
            mapping[int(cid)] = nxt
            nxt += 1
    return np.array([mapping[int(c)] for c in labels])


@dataclass
class Reclustered:
    """Online speakers by clustering again: every window heard so far (the last ``RECENT``, and a
    uniform sample of each speaker's older ones, ``EXEMPLARS`` in all, at most ``PER_SPEAKER``
    a speaker) is clustered offline (:func:`cluster_offline`, the same average linkage a whole
    file gets) whenever labels are asked for and new windows have come, and each cluster keeps
    the speaker id most of its windows had before (a cluster that matches none is a new
    speaker; see ``SPLIT_MIN``). A stream so decides as a whole file would, from what
    it has heard: a close second voice is a cluster of its own once its windows are together
    farther from the first voice's than the threshold, which a window-by-window decision against
    a drifting centroid missed. Ids: enrolled references ``0..R-1``, then in order of opening.
    Words already labelled keep their labels (the tracker's rule); only the windows' ids move.

    :meth:`add` takes objects with an ``embedding`` and a writable ``cluster`` (the tracker's
    windows); :meth:`update` sets ``cluster`` on the recent ones."""

    config: SpeakerConfig
    refs: list[np.ndarray] = field(default_factory=list)
    recent: deque = field(default_factory=deque)
    exemplars: dict[int, list[np.ndarray]] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)  # windows each speaker has had (for reservoir sampling)
    next_id: int = 0
    dirty: bool = False

    # at most 240 windows clustered (2 minutes of continuous speech at a 1 s hop, and the older
    # sample): ~6 ms a clustering, once per new window (average linkage is quadratic in them)
    RECENT = 120
    EXEMPLARS = 120
    PER_SPEAKER = 16
    # a cluster made mostly of windows a known speaker had is that speaker split in two: another
    # voice only with this many windows (the run OnlineClusters' split test asks for)
    SPLIT_MIN = SPLIT_RUN

    def _cap(self) -> int:
        """Older windows kept a speaker: ``PER_SPEAKER``, fewer once many speakers share ``EXEMPLARS``."""
        return max(2, min(self.PER_SPEAKER, self.EXEMPLARS // max(1, len(self.exemplars))))

    def __post_init__(self) -> None:
        self.next_id = len(self.refs)
        self.rng = np.random.default_rng(0)

    def add(self, window) -> None:
        self.recent.append(window)
        self.dirty = True
        if len(self.recent) > self.RECENT:
            old = self.recent.popleft()
            if old.cluster >= 0:  # a speaker's older windows: a fixed-size uniform sample of them
                keep, n = self.exemplars.setdefault(old.cluster, []), self.seen.get(old.cluster, 0)
                self.seen[old.cluster] = n + 1
                cap = self._cap()
                if len(keep) < cap:
                    keep.append(old.embedding)
                else:
                    j = int(self.rng.integers(0, n + 1))
                    if j < len(keep):
                        keep[j] = old.embedding
                for k, es in self.exemplars.items():  # more speakers, fewer windows each
                    if len(es) > cap:
                        self.exemplars[k] = [es[i] for i in sorted(self.rng.choice(len(es), cap, replace=False))]

    def update(self) -> None:
        """Cluster again when windows came since the last time; sets each recent window's
        ``cluster`` to its speaker id."""
        if not self.dirty or not self.recent:
            return
        self.dirty = False
        old = [(k, e) for k, es in self.exemplars.items() for e in es]
        embs = np.stack([e for _, e in old] + [w.embedding for w in self.recent])
        before = [k for k, _ in old] + [w.cluster for w in self.recent]
        ids = cluster_offline(embs, self._now_config(), self.refs)
        votes: dict[tuple[int, int], int] = {}
        for c, k in zip(ids, before, strict=True):
            if k >= len(self.refs) and c >= len(self.refs):  # reference matches are fixed
                votes[(int(c), k)] = votes.get((int(c), k), 0) + 1
        mapping = {c: c for c in range(len(self.refs))}
        taken = set(mapping.values())
        for (c, k), _ in sorted(votes.items(), key=lambda kv: -kv[1]):
            if c not in mapping and k not in taken:
                mapping[c] = k
                taken.add(k)
        for c in sorted({int(c) for c in ids}):
            if c in mapping:
                continue
            prior = [k for cc, k in zip(ids, before, strict=True) if cc == c and k != PENDING]
            size = int((ids == c).sum())
            if 2 * len(prior) > size and size < self.SPLIT_MIN:
                # mostly windows a speaker already had, too few to be another voice: still that speaker
                mapping[c] = max(set(prior), key=prior.count)
            else:
                mapping[c] = self.next_id
                self.next_id += 1
        for w, c in zip(self.recent, ids[len(old):], strict=True):
            w.cluster = mapping[int(c)]
        # exemplars of a speaker whose windows are now another's follow them
        moved: dict[int, list[np.ndarray]] = {}
        for (_, e), c in zip(old, ids[: len(old)], strict=True):
            moved.setdefault(mapping[int(c)], []).append(e)
        cap = self._cap()
        self.exemplars = {k: v[:cap] for k, v in moved.items()}

    def _now_config(self) -> SpeakerConfig:
        """The bounds as a stream can keep them: at most ``max_speakers`` (more are merged into
        the nearest), but ``min_speakers`` is not forced on the windows heard so far (the others
        may not have spoken yet): while fewer are open, a cluster splits more easily, by
        ``OnlineClusters.MIN_MARGIN`` on the similarity, as the window-by-window tracker does."""
        cfg = self.config
        short = cfg.min_speakers > 1 and self.speakers < cfg.min_speakers
        return SpeakerConfig(max_speakers=cfg.max_speakers, encoder=cfg.encoder,
                             threshold=cfg.threshold + (OnlineClusters.MIN_MARGIN if short else 0.0),
                             centroid_threshold=cfg.centroid_threshold)

    @property
    def speakers(self) -> int:
        return len({w.cluster for w in self.recent if w.cluster != PENDING} | set(self.exemplars))
