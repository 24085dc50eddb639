"""Measure the same-speaker threshold: 1.6 s partials of the shared data's speakers (up to 16 a
speaker, from voiced audio), the cosine similarity of every same- and different-speaker pair, and
the threshold where the two error rates meet (the equal-error rate). ``python -m
susurrus.speakers.threshold [DATA_ROOT]``; :data:`~susurrus.speakers.cluster.SAME_SPEAKER` is
this figure rounded."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from susurrus.audio.io import decode_audio
from susurrus.speakers.conversations import speaker_pool
from susurrus.speakers.encoder import PARTIAL_SAMPLES, embed_partials
from susurrus.speakers.tracker import energy_voiced


def equal_error(same: np.ndarray, diff: np.ndarray) -> tuple[float, float]:
    """(threshold, EER): the similarity where false rejections equal false acceptances."""
    grid = np.linspace(0, 1, 1001)
    frr = np.array([(same < t).mean() for t in grid])
    far = np.array([(diff >= t).mean() for t in grid])
    i = int(np.argmin(np.abs(frr - far)))
    return float(grid[i]), float((frr[i] + far[i]) / 2)


def main(root: str = "../shared/data") -> None:
    embs, who = [], []
    for spk, files in speaker_pool(Path(root)).items():
        x = np.concatenate([decode_audio(str(f)) for f in files])
        pieces = [x[i: i + PARTIAL_SAMPLES] for i in range(0, len(x) - PARTIAL_SAMPLES, PARTIAL_SAMPLES)]
        pieces = [p for p in pieces if energy_voiced(p, 0, 1.6) >= 0.5][:16]
        embs.append(embed_partials(pieces))
        who += [spk] * len(pieces)
    e = np.concatenate(embs)
    sims = e @ e.T
    w = np.array(who)
    iu = np.triu_indices(len(w), 1)
    same = w[iu[0]] == w[iu[1]]
    thr, eer = equal_error(sims[iu][same], sims[iu][~same])
    print(f"{len(set(who))} speakers, {len(w)} partials, {same.sum()} same / {(~same).sum()} different pairs")
    print(f"same-speaker similarity: median {np.median(sims[iu][same]):.3f}; "
          f"different: median {np.median(sims[iu][~same]):.3f}")
    print(f"equal-error threshold {thr:.3f}, EER {eer:.1%}")
    # an embedding against a speaker's centroid (the mean of 8 other embeddings), as the stream
    # compares: same speaker (its own speaker's, itself left out) or another speaker's
    rng = np.random.default_rng(0)
    same_c, diff_c = [], []
    spks = sorted(set(who))
    for spk in spks:
        idx = np.flatnonzero(w == spk)
        if len(idx) < 9:
            continue
        for i in idx:
            others = rng.choice(idx[idx != i], 8, replace=False)
            c = e[others].mean(0)
            same_c.append(float(e[i] @ c / np.linalg.norm(c)))
            j = rng.choice(np.flatnonzero(w != spk))
            diff_c.append(float(e[j] @ c / np.linalg.norm(c)))
    thr_c, eer_c = equal_error(np.array(same_c), np.array(diff_c))
    print(f"against a centroid of 8: equal-error threshold {thr_c:.3f}, EER {eer_c:.1%} "
          f"({len(same_c)} same / {len(diff_c)} different)")


if __name__ == "__main__":
    main(*sys.argv[1:])
