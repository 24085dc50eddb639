"""A stream's state: everything that changes while one stream is transcribed, as a tree of
dataclasses (as the encoder's :class:`~susurrus.streaming.encoder.EncoderState`, the front end's
:class:`~susurrus.streaming.frontend.MelState` and the VAD's ``VadState`` / ``TurnState`` keep
theirs). The model, the VAD network, the settings and the silence keys/values are shared and
never change; :class:`~susurrus.streaming.session.StreamSession` is the step over them and one
:class:`StreamState`. A fresh state is a reset stream; ``print(state)`` shows it in a screen."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from susurrus.decoding.decode import LogitRules
from susurrus.model.caches import KV, DecoderCache, HeadKV, PartedKV, heads_of
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper
from susurrus.streaming.config import SILENCE_LEVEL
from susurrus.streaming.encoder import EncoderState, silence_encoding
from susurrus.streaming.events import StepStats, StreamWord
from susurrus.streaming.frontend import MelState
from susurrus.streaming.vad import TurnConfig, TurnState, VadState


@dataclass
class WindowState:
    """The current (≤ 30 s) window: its mel frames, encoder state and committed tokens."""

    start_frame: int = 0  # absolute mel frame where the window starts
    mel: torch.Tensor = field(default_factory=lambda: torch.zeros(80, 0))  # log10 power frames
    encoder: EncoderState | None = None
    committed: list[int] = field(default_factory=list)  # tokens committed in this window
    committed_end_frame: int = 0  # encoder frame where the last committed word ends
    last_hypothesis: list[int] = field(default_factory=list)  # uncommitted tokens of the last step
    lost_steps: int = 0  # consecutive steps whose continuation read past the audio while speech remained
    read_again_at: int | None = None  # encoder frames when it was last read again for an overdue commit (overdue.py)
    last_reading: list[int] = field(default_factory=list)  # ... that reading's tokens, when it committed none
    first_tokens: set[int] = field(default_factory=set)  # the first tokens of its hypotheses before its first commit
    first_read_ms: int | None = None  # the window's audio (ms) when a step first decoded something in it
    prefix: DecoderCache | None = None  # self-attention keys/values of the forced prefix but its last token
    # the storage ``mel`` is the front of: new frames are written in place, and it is reallocated
    # (with room to spare) only now and then, not at every step (growing copies fragment the heap
    # of a process that runs streams for days)
    mel_store: torch.Tensor | None = field(default=None, repr=False)

    @torch.inference_mode()
    def append_mel(self, frames: torch.Tensor) -> None:
        """``mel`` followed by ``frames`` (n_mels, n)."""
        n0, n = self.mel.shape[1], frames.shape[1]
        store = self.mel_store
        if store is None or n0 + n > store.shape[1] or store.data_ptr() != self.mel.data_ptr():
            store = self.mel.new_empty((self.mel.shape[0], n0 + n + max(n, (n0 + n) // 4)))
            store[:, :n0] = self.mel
            self.mel_store = store
        store[:, n0:n0 + n] = frames
        self.mel = store[:, :n0 + n]


class CrossBuffer:
    """Per-layer cross-attention keys/values over 1500 positions as the decoder reads them: the
    window's real frames (this stream's own storage, at the front) and behind them the encoder
    output of silence (projected once per model and shared by every stream, not copied: each
    decoder token reads all 1500 positions, so a copy per stream would be read from memory
    again for every stream). Both are kept head by head (:class:`~susurrus.model.caches.HeadKV`),
    the layout a decoder token's attention reads. ``kv``: one :class:`CrossLayer` per layer,
    reading the buffer as it is when used."""

    def __init__(self, pad: list[HeadKV]):
        self.pad = pad
        self.own = [HeadKV(torch.empty_like(p.k), torch.empty_like(p.v)) for p in pad]
        self.real = 0  # positions holding real frames: own[:real], then pad[real:]
        self.kv = [CrossLayer(self, i) for i in range(len(pad))]

    def __repr__(self) -> str:
        positions = self.pad[0].length if self.pad else 0
        return f"CrossBuffer(layers={len(self.pad)}, positions={positions}, real={self.real})"

    def write(self, start: int, layers: list[KV]) -> None:
        """Frames' keys/values (``layers``: (1, n, width) each, as the decoder projects them) at
        positions ``[start, start + n)``; positions past them read silence again."""
        n = layers[0].k.shape[1]
        if start > self.real:  # the silence between stays what it was
            for own, pad in zip(self.own, self.pad):
                own.k[:, :, self.real:start] = pad.k[:, :, self.real:start]
                own.v[:, :, self.real:start] = pad.v[:, :, self.real:start]
        for own, new in zip(self.own, layers):
            h = own.k.shape[1]
            own.k[:, :, start:start + n] = heads_of(new.k, h)
            own.v[:, :, start:start + n] = heads_of(new.v, h)
        self.real = start + n  # (positions past it read silence again)

    def save(self, start: int, stop: int) -> tuple[int, int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """A copy of positions ``[start, stop)`` (and of ``real``), for :meth:`load`."""
        stop = min(stop, self.real)
        return start, self.real, [(kv.k[:, :, start:stop].clone(), kv.v[:, :, start:stop].clone()) for kv in self.own]

    def load(self, saved: tuple[int, int, list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Put back what :meth:`save` copied."""
        start, self.real, layers = saved
        for kv, (k, v) in zip(self.own, layers):
            kv.k[:, :, start:start + k.shape[2]], kv.v[:, :, start:start + v.shape[2]] = k, v

    def restore(self, start: int) -> None:
        """Silence again from ``start`` on."""
        self.real = min(self.real, start)


class CrossLayer(PartedKV):
    """One layer of a :class:`CrossBuffer` as the decoder reads it: its real frames, then the
    shared silence (:class:`~susurrus.model.caches.PartedKV`)."""

    def __init__(self, buffer: CrossBuffer, layer: int):
        self.buffer, self.layer = buffer, layer

    @property
    def k(self) -> torch.Tensor:
        return self.buffer.own[self.layer].k

    @property
    def v(self) -> torch.Tensor:
        return self.buffer.own[self.layer].v

    def parts(self) -> list[HeadKV]:
        n = self.buffer.real
        own, pad = self.buffer.own[self.layer], self.buffer.pad[self.layer]
        return [kv for kv in (own.narrow(0, n), pad.narrow(n, pad.length - n)) if kv.length]

    def shared(self) -> tuple[HeadKV, int] | None:
        pad = self.buffer.pad[self.layer]
        return (pad, self.buffer.real) if self.buffer.real < pad.length else None


@torch.inference_mode()
def silence_cross_kv(net: Whisper, level: float = SILENCE_LEVEL) -> list[HeadKV]:
    """Cross keys/values of the encoder output for a window of digital silence (normalised
    log-mel ``level``), head by head. One padded encode (~0.4 s with tiny): compute it once per
    model and share it between sessions (``WhisperModel.stream`` does). The same pass gives the
    keys the opening check reads (:func:`silence_encoding`), so the first stream's first opening
    does not wait for a second one."""
    return [HeadKV.of(kv, net.dims.n_text_head) for kv in net.decoder.cross_kv(silence_encoding(net, level)[1])]



@dataclass
class FeedState:
    """The audio fed: counters, and the samples not yet through the mel front end."""

    samples_fed: int = 0
    samples_at_last_step: int = 0  # where the last step boundary fell
    unheard: list[np.ndarray] = field(default_factory=list)  # samples fed, not through the mel front end yet
    finished: bool = False


@dataclass
class GateState:
    """The VAD gate: when speech was last heard, and whether the engine is idle."""

    last_speech_ms: float | None = None  # end of the last VAD frame that may be speech (the gate's)
    idle: bool = False  # computing nothing until speech (and again after long non-speech)
    idle_since_ms: float = 0.0  # when the stream last went idle: speech after it wakes it
    skipped: list[tuple[float, float]] = field(default_factory=list)  # audio (s) the gate never let the engine encode


@dataclass
class OpenTurn:
    """The output side of the turn open now (``turns``; the VAD side is ``TurnState``)."""

    start_ms: int = 0  # audio_start_ms of the open turn
    first_word: int = 0  # index in ``words`` of the open turn's first word
    pause: tuple[int, int | None] = (-1, None)  # (last speech frame, silence that ends the turn)
    open_punctuation: str = ""  # a turn's closing punctuation, output but not in the decoder's context


@dataclass
class LanguageState:
    """The language decoded in (None: not detected yet) and the tokenizer set to it."""

    code: str | None
    tokenizer: Tokenizer = field(repr=False)


@dataclass
class DecoderState:
    """What the decoder is prompted with beyond the window, and the loop/stall flags that reset it."""

    previous: list[int] = field(default_factory=list)  # committed tokens of earlier windows (prompt context)
    reset_prompt: bool = False  # the next window starts without the text so far as its prompt
    looping: bool = False  # the last step's decoding looped: re-anchor without the prompt
    retrying: bool = False  # in a window's second last decode (``StreamSession._retry_end``)
    decode_looped: bool = False  # (set by ``StreamSession._decode``)
    rules: LogitRules | None = field(default=None, repr=False)  # for the current prompt length
    pieces: dict[int, str] = field(default_factory=dict, repr=False)  # each token's text (a cache)


@dataclass
class OutputState:
    """What the stream said: committed words, refused ones, the interim guess, step statistics."""

    words: list[StreamWord] = field(default_factory=list)  # every committed word
    dropped: list[StreamWord] = field(default_factory=list)  # words the guards refused
    interim: str = ""  # the latest interim text
    stats: list[StepStats] = field(default_factory=list)


@dataclass
class StreamState:
    """Everything that changes while one stream is transcribed."""

    feed: FeedState
    mel: MelState
    window: WindowState
    cross: CrossBuffer
    vad: VadState
    gate: GateState
    turn: TurnState | None
    open_turn: OpenTurn
    language: LanguageState
    decoder: DecoderState
    output: OutputState

    @classmethod
    def fresh(cls, n_mels: int, silence: list[KV], tokenizer: Tokenizer, language: str | None,
              turns: TurnConfig | None, idle: bool) -> StreamState:
        """The state of a stream that has heard nothing: ``silence`` (:func:`silence_cross_kv`) is
        copied into its cross-attention buffer; ``tokenizer`` is set to ``language``."""
        return cls(FeedState(), MelState(n_mels=n_mels), WindowState(mel=torch.zeros(n_mels, 0)), CrossBuffer(silence),
                   VadState(), GateState(idle=idle), TurnState(turns) if turns else None, OpenTurn(),
                   LanguageState(language, tokenizer), DecoderState(), OutputState())

    def __repr__(self) -> str:
        return "StreamState(\n" + "".join(f"  {f.name}={brief(getattr(self, f.name))},\n"
                                           for f in dataclasses.fields(self)) + ")"


def brief(value: object) -> str:
    """A state value in a line: tensors and arrays by shape, long lists by length, dataclasses
    field by field (those marked ``repr=False`` left out)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        if len(value) > 6:
            return f"[{len(value)} items]"
        inner = ", ".join(brief(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return f"{{{len(value)} entries}}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(f"{f.name}={brief(getattr(value, f.name))}" for f in dataclasses.fields(value) if f.repr)
        return f"{type(value).__name__}({inner})"
    if value is None or isinstance(value, (bool, int, float, str)) or type(value).__repr__ is not object.__repr__:
        return repr(value)
    return f"<{type(value).__name__}>"


def state_attribute(path: str) -> property:
    """A session attribute that lives in ``self.state`` at ``path`` (``"output.words"``): the
    step's code and the session's users read and write it by its short name."""
    group, _, name = path.rpartition(".")

    def get(self):
        return getattr(getattr(self.state, group) if group else self.state, name)

    def put(self, value) -> None:
        setattr(getattr(self.state, group) if group else self.state, name, value)

    return property(get, put, doc=f"``state.{path}``")
