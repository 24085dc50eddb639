"""The commit policy: which of a step's decoded tokens become final.

AlignAtt (``policy="alignatt"``, the default): a token is stable while the alignment heads
attend at least ``commit_margin_ms`` before the audio edge (``uncertain_margin_ms`` for a token
less likely than ``confident_prob``, ``first_margin_ms`` until a window's first commit, whose
opening words must also be what the previous step decoded). ``policy="agreement"``: what two
consecutive steps agree on (LocalAgreement), half the margin from the edge. A translation
commits whole sentences two steps agree on. Then :func:`word_boundary` keeps whole words only.
Pure functions over token lists; ``StreamSession._step`` applies them."""

from __future__ import annotations

from collections.abc import Callable

from susurrus.streaming.config import FRAME_S, SENTENCE_END, StreamConfig


def has_letters(text: str) -> bool:
    return any(c.isalnum() for c in text)


def capitalised(word: str) -> str:
    """``word`` (with its leading space) with its first letter upper case: " ask" -> " Ask"
    (scripts without case unchanged)."""
    at = next((i for i, c in enumerate(word) if c.isalpha()), None)
    return word if at is None else word[:at] + word[at].upper() + word[at + 1:]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def sentences_agreed(tokens: list[int], previous: list[int], decode: Callable[[list[int]], str]) -> int:
    """A translation is not aligned with the audio and reorders it: commit whole sentences that
    two consecutive steps agree on (``previous``: the last step's uncommitted tokens) and that
    the decoder has gone on from (a sentence it translated to the edge of the audio may still
    change); the rest waits for the window's last decode."""
    agreed = common_prefix(tokens[:-1], previous)
    while agreed and not (decode(tokens[agreed - 1:agreed]).rstrip().endswith(SENTENCE_END)
                          and has_letters(decode(tokens[agreed:]))):
        agreed -= 1
    return agreed


def attended_before(frames: list[int], probs: list[float], agreed: int, edge: int, far_edge: int,
                    confident_prob: float, n_real: int, relaxed: bool = False) -> int:
    """AlignAtt: how many of the first ``agreed`` tokens attended before ``edge`` (``far_edge``
    for those less likely than ``confident_prob``); ``relaxed``: one token read past the audio
    (``n_real`` frames) between stable ones passes too (an attention glitch)."""
    n = 0
    while n < agreed:
        limit = edge if probs[n] >= confident_prob else far_edge
        glitch = relaxed and frames[n] >= n_real and n + 1 < agreed and frames[n + 1] < limit
        if not (frames[n] < limit or glitch):
            break
        n += 1
    return n


def stable_count(tokens: list[int], frames: list[int], probs: list[float], n_real: int, cfg: StreamConfig,
                 opening: bool, previous: list[int], decode: Callable[[list[int]], str], relaxed: bool = False) -> int:
    """How many of a step's ``tokens`` may be committed (before :func:`word_boundary`).
    ``frames``: the encoder frame each attended to; ``n_real``: the window's audio frames;
    ``opening``: nothing committed in the window yet; ``previous``: the last step's uncommitted
    tokens; ``decode``: the tokenizer's."""
    margin = cfg.commit_margin_ms
    if opening:
        margin = max(margin, cfg.first_margin_ms)
    agreed = len(tokens)
    if cfg.task != "transcribe":
        return sentences_agreed(tokens, previous, decode)
    if cfg.policy == "agreement":
        # what two consecutive steps agree on, away from the edge by half the margin
        agreed = common_prefix(tokens, previous)
        margin //= 2
    elif opening and cfg.opening_agreement:
        # a window's opening words are read without left context, where Whisper guesses:
        # they must also be what the previous step decoded (LocalAgreement) to commit
        agreed = common_prefix(tokens, previous)
    edge = n_real - round(margin / 1000 / FRAME_S)
    far_edge = n_real - round(max(margin, cfg.uncertain_margin_ms) / 1000 / FRAME_S)
    return attended_before(frames, probs, agreed, edge, far_edge, cfg.confident_prob, n_real, relaxed)


def word_boundary(tokens: list[int], n: int, final: bool, starts_word: Callable[[int], bool], eot: int,
                  following: int | None = None) -> int:
    """Shrink ``n`` so that only complete words are committed: the token after the last
    committed one (or, after the last decoded token, ``following``, the one the model
    predicted next) must start a new word (at the end of the stream everything goes)."""
    if final:
        return n
    if n == len(tokens) and following is not None and following < eot and starts_word(following):
        return n
    while n > 0 and not (n < len(tokens) and starts_word(tokens[n])):
        n -= 1
    return n
