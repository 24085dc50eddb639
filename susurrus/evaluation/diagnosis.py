"""Pieces for diagnosing a stream against its oracles (``benchmarks/diagnostics/base_diagnosis.py``).

* :func:`parse_overrides` / :func:`build_config`: ``StreamConfig`` settings written as
  ``key=value,key=value`` on a command line, with look-aheads past what ``StreamConfig``
  accepts (``lookahead_ms`` up to 30 000: the whole window re-encoded in both directions at
  every step);
* ``silence=LEVEL``: the engine with the silence behind the audio encoded (once, on its own)
  from another constant log-mel level (``silence_cross_kv(net, LEVEL)``; the engine's is
  ``SILENCE_LEVEL``, -0.7 since b9fab33, the log-mel floor under speech peaking at ~1.2; 0
  before);
* :class:`PaddedWindowSession`: the oracle encoder, the same decoder and commit policy over the
  encoder output of the whole window padded to 30 s and encoded at once at every step, as
  offline Whisper (and SimulStreaming) read it: every frame hears all the audio, and the
  padding behind the audio is encoded in its context, not once on its own;
* :func:`error_profile`: where the word errors of a hypothesis lie (opening, middle, ending)
  and what they are (substitutions, deletions, insertions; insertions after the last reference
  word: invented continuations).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

import torch

from susurrus.audio.features import DYNAMIC_RANGE, N_FRAMES, normalize
from susurrus.evaluation.alignment import edit_table
from susurrus.evaluation.metrics import normalize as normalize_text
from susurrus.streaming.calls import Steps
from susurrus.streaming.encoder import EncoderState
from susurrus.streaming.session import StreamConfig, StreamSession

# settings StreamConfig validates to a range this benchmark goes past, and how far it may go
UNCHECKED_MAX = {"lookahead_ms": 30000}
# pseudo-settings (not StreamConfig fields) that choose the session class
SESSION_KEYS = ("encoder", "pad", "silence")


def _typed(field: dataclasses.Field, text: str) -> Any:
    kind = str(field.type)
    if text in ("None", "none"):
        return None
    if "bool" in kind:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{field.name}: not a boolean: {text!r}")
        return text.lower() in ("true", "1")
    if "int" in kind and "float" not in kind:
        return int(text)
    if "float" in kind:
        return float(text)
    return text


def parse_overrides(spec: str) -> dict[str, Any]:
    """``"lookahead_ms=1000,commit_margin_ms=400"`` as typed values; ``""`` or ``"default"``
    is no override. Keys must be ``StreamConfig`` fields or :data:`SESSION_KEYS`; an unknown
    key raises ``KeyError`` (a field this checkout's StreamConfig does not have yet)."""
    fields = {f.name: f for f in dataclasses.fields(StreamConfig)}
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part == "default":
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"{part!r}: expected key=value")
        if key in SESSION_KEYS:
            out[key] = value.strip()
        elif key in fields:
            out[key] = _typed(fields[key], value.strip())
        else:
            raise KeyError(key)
    return out


def build_config(overrides: dict[str, Any], language: str | None = None) -> StreamConfig:
    """A validated ``StreamConfig`` with ``overrides`` (minus :data:`SESSION_KEYS`); values of
    :data:`UNCHECKED_MAX` settings beyond ``StreamConfig``'s range are set after validation
    (``object.__setattr__`` on the frozen config), up to their maximum here."""
    settings = {k: v for k, v in overrides.items() if k not in SESSION_KEYS}
    late = {}
    for key, top in UNCHECKED_MAX.items():
        if key in settings and settings[key] > 5000:
            if settings[key] > top:
                raise ValueError(f"{key} must be at most {top}, not {settings[key]}")
            late[key] = settings.pop(key)
    config = replace(StreamConfig(), **settings, language=language)
    for key, value in late.items():
        object.__setattr__(config, key, value)
    return config


class PaddedWindowSession(StreamSession):
    """The oracle encoder: at every step the cross-attention reads the encoder output of the
    window's audio so far padded to 30 s, encoded in one bidirectional pass (what offline
    Whisper reads), instead of the incremental encoder's frames and the silence encoded
    once. The decoder, its commit policy and every guard are the engine's. ``pad_level``:
    the padding's normalised log-mel (``None``: the floor, digital silence, as Whisper's
    log-mel of zero samples and SimulStreaming; ``0.0``: what padding the normalised log-mel
    with zeros gives, as offline ``transcribe`` does). The incremental encoder still runs
    (the session's steps need its frame count), so the cost is an upper bound."""

    pad_level: float | None = None

    def _update_cross(self, before: EncoderState, enc: EncoderState) -> Steps[None]:
        yield from ()  # a generator, as the session's step expects, of no model calls: the oracle's run here
        mel = self.window.mel[:, :N_FRAMES]
        top = self.mel_state.running_max
        level = (top - DYNAMIC_RANGE + 4.0) / 4.0 if self.pad_level is None else self.pad_level
        padded = torch.full((mel.shape[0], N_FRAMES), float(level))
        padded[:, :mel.shape[1]] = normalize(mel, top)
        features = self.net.embed_audio(padded[None])
        self.cross.write(0, self.net.decoder.cross_kv(features))


def session_class(overrides: dict[str, Any]) -> type[StreamSession]:
    """``encoder=padded`` (with ``pad=floor`` or ``pad=zero``): :class:`PaddedWindowSession`;
    otherwise the engine's own ``StreamSession``."""
    encoder = overrides.get("encoder", "incremental")
    if encoder == "incremental":
        return StreamSession
    if encoder != "padded":
        raise ValueError(f"encoder must be 'incremental' or 'padded', not {encoder!r}")
    pad = overrides.get("pad", "floor")
    if pad not in ("floor", "zero"):
        raise ValueError(f"pad must be 'floor' or 'zero', not {pad!r}")
    return type(f"PaddedWindowSession_{pad}", (PaddedWindowSession,), {"pad_level": None if pad == "floor" else 0.0})


@dataclass
class ErrorProfile:
    """Word errors of a hypothesis against a reference, by kind and by place."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    opening: int = 0  # errors on the first ``edge`` reference words (insertions before them included)
    ending: int = 0  # errors on the last ``edge`` reference words
    tail_insertions: int = 0  # hypothesis words after the last reference word: invented continuations
    lost_tail: int = 0  # reference words deleted at the end (no hypothesis word after them)

    def add(self, other: ErrorProfile) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _edit_ops(ref: list[str], hyp: list[str]) -> list[tuple[str, int, int]]:
    """A minimum-edit alignment as ops ``(kind, ref index, hyp index)``, kind one of ``=``,
    ``S``, ``D`` (ref word missing; hyp index: the position it would be at), ``I``."""
    cost = edit_table(ref, hyp)
    ops = []
    i, j = len(ref), len(hyp)
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            ops.append(("=" if ref[i - 1] == hyp[j - 1] else "S", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            ops.append(("D", i - 1, j))
            i -= 1
        else:
            ops.append(("I", i, j - 1))
            j -= 1
    return ops[::-1]


def error_profile(reference: str, hypothesis: str, language: str = "en", edge: int = 3) -> ErrorProfile:
    """Where the errors of ``hypothesis`` lie (after the WER normaliser): the first and last
    ``edge`` reference words, insertions after the last reference word, deletions of the
    reference's last words with nothing after them."""
    ref, hyp = normalize_text(reference, language).split(), normalize_text(hypothesis, language).split()
    ops = _edit_ops(ref, hyp)
    p = ErrorProfile()
    n = len(ref)
    for kind, i, _ in ops:
        if kind == "=":
            continue
        p.substitutions += kind == "S"
        p.deletions += kind == "D"
        p.insertions += kind == "I"
        if kind == "I" and i >= n:
            p.tail_insertions += 1
        elif i < edge:
            p.opening += 1
        elif i >= n - edge:
            p.ending += 1
    for kind, _, _ in reversed(ops):  # deletions at the very end: a lost ending
        if kind != "D":
            break
        p.lost_tail += 1
    return p
