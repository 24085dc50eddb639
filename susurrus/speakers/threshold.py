"""Measure the same-speaker threshold: 1.6 s partials of the shared data's speakers (up to 16 a
speaker, from voiced audio), the cosine similarity of every same- and different-speaker pair, and
the threshold where the two error rates meet (the equal-error rate). ``python -m
susurrus.speakers.threshold [DATA_ROOT] [--encoder ge2e|campplus]``;
:data:`~susurrus.speakers.cluster.SAME_SPEAKER` is this figure rounded (and
``settings.ENCODER_SPECS`` per encoder). Then the voices the conversations
confuse (:func:`close_voices`): two pairs of children, and Thorsten's emotional takes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from susurrus.audio.io import decode_audio
from susurrus.speakers.conversations import speaker_pool
from susurrus.speakers.encoder import PARTIAL_SAMPLES, embed_partials
from susurrus.speakers.settings import DEFAULT_ENCODER, ENCODER_NAMES
from susurrus.speakers.tracker import energy_voiced


def equal_error(same: np.ndarray, diff: np.ndarray) -> tuple[float, float]:
    """(threshold, EER): the similarity where false rejections equal false acceptances."""
    grid = np.linspace(0, 1, 1001)
    frr = np.array([(same < t).mean() for t in grid])
    far = np.array([(diff >= t).mean() for t in grid])
    i = int(np.argmin(np.abs(frr - far)))
    return float(grid[i]), float((frr[i] + far[i]) / 2)


def main(root: str = "../shared/data", encoder: str = DEFAULT_ENCODER) -> None:
    print(f"encoder: {encoder}")
    embs, who = [], []
    for spk, files in speaker_pool(Path(root)).items():
        x = np.concatenate([decode_audio(str(f)) for f in files])
        pieces = [x[i: i + PARTIAL_SAMPLES] for i in range(0, len(x) - PARTIAL_SAMPLES, PARTIAL_SAMPLES)]
        pieces = [p for p in pieces if energy_voiced(p, 0, 1.6) >= 0.5][:16]
        embs.append(embed_partials(pieces, encoder=encoder))
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
    close_voices(Path(root), e, w, encoder)


CLOSE_PAIRS = (("speechocean762/1404", "speechocean762/9555"), ("speechocean762/2030", "speechocean762/9640"))


def close_voices(root: Path, e: np.ndarray, who: np.ndarray, encoder: str) -> None:
    """The two pairs of children the 2-speaker conversations merge (mean similarity of their
    partials: within each, between the two), and each of Thorsten's emotional takes (its first
    1.6 s) against the centroid of his neutral recordings' partials, beside the neutral partials'
    own similarity to it (each left out) and the other speakers' partials'."""
    for a, b in CLOSE_PAIRS:
        ea, eb = e[who == a], e[who == b]
        if len(ea) < 2 or len(eb) < 2:
            continue
        within = [float((x @ x.T)[np.triu_indices(len(x), 1)].mean()) for x in (ea, eb)]
        print(f"{a} vs {b}: within {within[0]:.3f} / {within[1]:.3f}, between {float((ea @ eb.T).mean()):.3f}")
    manifest = root / "multi" / "manifest.jsonl"
    if not manifest.exists():
        return
    items = [json.loads(line) for line in manifest.read_text().splitlines()]
    takes = {i["id"]: root / "multi" / i["audio"] for i in items if i.get("group") == "thorsten/emotional"}
    neutral = [root / "multi" / i["audio"] for i in items if i.get("group") == "thorsten/neutral"]
    pieces = []
    for f in neutral:
        x = decode_audio(str(f))
        pieces += [p for p in (x[i: i + PARTIAL_SAMPLES] for i in range(0, len(x) - PARTIAL_SAMPLES, PARTIAL_SAMPLES))
                   if energy_voiced(p, 0, 1.6) >= 0.5]
    n = embed_partials(pieces, encoder=encoder)
    c = n.sum(0)
    own = [float(v @ (c - v) / np.linalg.norm(c - v)) for v in n]
    others = e[who != "thorsten"] @ (c / np.linalg.norm(c))
    print(f"Thorsten: {len(n)} neutral partials against their centroid (each left out): mean {np.mean(own):.3f}, "
          f"min {np.min(own):.3f}; the other 39 speakers' partials: mean {others.mean():.3f}, "
          f"max {others.max():.3f}")
    t = embed_partials([decode_audio(str(f))[:PARTIAL_SAMPLES] for f in takes.values()], encoder=encoder)
    sims = t @ (c / np.linalg.norm(c))
    print("Thorsten's emotional takes against that centroid: "
          + ", ".join(f"{k.removeprefix('thorsten_emotional_')} {v:.3f}" for k, v in zip(takes, sims, strict=True)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", default="../shared/data", help="the shared data (default ../shared/data)")
    ap.add_argument("--encoder", default=DEFAULT_ENCODER, choices=ENCODER_NAMES, help="the speaker encoder")
    args = ap.parse_args()
    main(args.root, args.encoder)
