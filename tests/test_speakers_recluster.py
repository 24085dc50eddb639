"""A stream's speakers found by clustering every window again (``cluster.Reclustered``, the
tracker's method with CAM++): ids that stay with their voices, a second voice found where a
window-by-window decision takes it into the first, a lone window that opens nobody,
``max_speakers``, an enrolled voice, and state bounded however long the stream. Embeddings are
synthetic unit vectors (no model): voices are directions, windows are noisy copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("scipy", reason="speaker clustering needs scipy (pip install susurrus[speakers])")

from susurrus.speakers.cluster import PENDING, OnlineClusters, Reclustered, SpeakerConfig  # noqa: E402

DIM = 192


@dataclass
class W:
    embedding: np.ndarray
    cluster: int = PENDING


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _voices(rng, n: int, between: float) -> list[np.ndarray]:
    """``n`` voice directions whose pairwise cosine is ``between``."""
    base = _unit(rng.normal(size=DIM))
    return [_unit(between ** 0.5 * base + (1 - between) ** 0.5 * _unit(rng.normal(size=DIM))) for _ in range(n)]


def _windows(rng, voice: np.ndarray, n: int, within: float = 0.6) -> list[W]:
    """Windows of one voice whose pairwise cosine is about ``within`` (CAM++'s same-speaker median)."""
    noise = _unit(rng.normal(size=(n, DIM)))
    return [W(_unit(within ** 0.5 * voice + (1 - within) ** 0.5 * e).astype(np.float32)) for e in noise]


def _feed(r: Reclustered, windows: list[W]) -> list[int]:
    for w in windows:
        r.add(w)
        r.update()  # as a stream labels every window's words
    return [w.cluster for w in windows]


def test_ids_stay_with_their_voices_across_turns():
    rng = np.random.default_rng(0)
    a, b = _voices(rng, 2, 0.0)
    r = Reclustered(SpeakerConfig(encoder="campplus"))
    first = _feed(r, _windows(rng, a, 8))
    second = _feed(r, _windows(rng, b, 8))
    third = _feed(r, _windows(rng, a, 6))
    assert set(first) == {0} and set(third) == {0}
    assert set(second[1:]) == {1}  # the new voice's first window waits for a second (a lone window opens nobody)
    assert r.speakers == 2


def test_a_lone_window_opens_no_speaker():
    rng = np.random.default_rng(1)
    a, b = _voices(rng, 2, 0.0)
    r = Reclustered(SpeakerConfig(encoder="campplus"))
    _feed(r, _windows(rng, a, 6) + _windows(rng, b, 1) + _windows(rng, a, 6))
    assert r.speakers == 1 and {w.cluster for w in r.recent} == {0}


def test_a_close_second_voice_is_found_where_window_by_window_merges_it():
    """Two close voices (two children, for CAM++): windows of the second are, one by one, mostly
    over the stream's centroid bar for the first, so the window-by-window tracker takes them
    into the first; clustering them all again separates the two (their windows are, on average,
    less alike than the same-speaker threshold)."""
    rng = np.random.default_rng(2)
    a, b = _voices(rng, 2, 0.5)
    wa, wb = _windows(rng, a, 20), _windows(rng, b, 12)
    cfg = SpeakerConfig(encoder="campplus")
    greedy = OnlineClusters(cfg)
    greedy.SPLIT_Z = float("inf")
    taken = [greedy.assign(w.embedding)[0] for w in wa + wb]
    assert len(greedy.sums) == 1 and taken[20:].count(0) >= 10
    r = Reclustered(cfg)
    _feed(r, wa)
    ids = _feed(r, wb)
    assert r.speakers == 2 and len(set(ids)) == 1 and ids[0] != 0 and {w.cluster for w in wa} == {0}


def test_max_speakers_merges_a_further_voice():
    rng = np.random.default_rng(3)
    a, b = _voices(rng, 2, 0.0)
    r = Reclustered(SpeakerConfig(encoder="campplus", max_speakers=1))
    _feed(r, _windows(rng, a, 6) + _windows(rng, b, 6))
    assert r.speakers == 1


def test_an_enrolled_voice_keeps_its_index():
    rng = np.random.default_rng(4)
    a, b = _voices(rng, 2, 0.0)
    ref = _unit(np.mean([w.embedding for w in _windows(rng, b, 8)], axis=0))
    r = Reclustered(SpeakerConfig(encoder="campplus"), [ref])
    ids_a = _feed(r, _windows(rng, a, 6))
    ids_b = _feed(r, _windows(rng, b, 6))
    assert set(ids_b) == {0} and set(ids_a[1:]) == {1}


def test_state_stays_bounded_and_an_old_voice_keeps_its_id():
    """Past ``RECENT`` windows only a sample of each speaker's older windows is kept; a voice
    last heard thousands of windows ago still gets its id back."""
    rng = np.random.default_rng(5)
    a, b, c = _voices(rng, 3, 0.0)
    r = Reclustered(SpeakerConfig(encoder="campplus"))
    r.RECENT = 40
    _feed(r, _windows(rng, a, 30))
    for _ in range(10):
        _feed(r, _windows(rng, b, 30))
        _feed(r, _windows(rng, c, 30))
    assert len(r.recent) == 40 and all(len(v) <= r.PER_SPEAKER for v in r.exemplars.values())
    assert sum(len(v) for v in r.exemplars.values()) <= r.EXEMPLARS
    back = _feed(r, _windows(rng, a, 10))
    assert set(back[1:]) == {0} and r.speakers == 3


@pytest.mark.parametrize("split", [3, 4])
def test_a_known_speakers_windows_split_off_open_a_speaker_only_with_four(split):
    """Clustering again can cut a speaker's own windows in two (a returning voice, an emotional
    take): a piece of fewer than ``SPLIT_MIN`` windows that speaker already had stays that
    speaker; four or more are another voice (the close voice a window-by-window decision took
    in), and open one."""
    rng = np.random.default_rng(6)
    a, b = _voices(rng, 2, 0.0)
    r = Reclustered(SpeakerConfig(encoder="campplus"))
    for w in _windows(rng, a, 9) + _windows(rng, b, split):
        w.cluster = 0  # all of them given to speaker 0 before
        r.add(w)
    r.next_id = 1
    r.update()
    assert [w.cluster for w in r.recent] == [0] * 9 + ([0] * split if split < r.SPLIT_MIN else [1] * split)
