"""What a session's audio becomes, and the work on it. Without server turn detection
(``turn_detection: null``) an :class:`Item` is the audio between two client commits, with its
own stream; with it (``server_vad`` / ``semantic_vad``) the connection's audio is one
:class:`TurnStream` whose speech turns (:class:`Turn`) are the items. :class:`Work` is what the
session queues on them and the transcriber runs, in order; :class:`TurnPolicy` is the seam where
per-item turn detection plugs in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from susurrus.audio.resampler import StreamResampler
from susurrus.streaming.session import StreamConfig, StreamSession

SAMPLE_RATE = 16000


# ---------------------------------------------------------------------------- turn policies (per item)


@dataclass(frozen=True)
class TurnSignal:
    """A turn-detection decision: ``speech_started`` / ``speech_stopped`` at ``audio_ms`` into
    the item; ``commit`` True to end the item there (as a client commit would)."""

    kind: str
    audio_ms: int
    commit: bool = False


class TurnPolicy(Protocol):
    """Where server-side turn detection plugs in. ``observe`` sees every block of an item's
    16 kHz audio in the worker, in order, and returns signals; the connection turns a signal
    with ``commit`` into the same path as a client commit (``RealtimeSession.turn``)."""

    def observe(self, samples: np.ndarray, item_time: float) -> list[TurnSignal]: ...


class ManualTurns:
    """``turn_detection: null``: the client commits; nothing is detected."""

    def observe(self, samples: np.ndarray, item_time: float) -> list[TurnSignal]:
        return []


def turn_policy_for(turn_detection: dict[str, Any] | None) -> TurnPolicy:
    """The per-item policy for a session's ``turn_detection``: items exist only without server
    turn detection (``null``: the client commits). ``server_vad``/``semantic_vad`` do not go
    through items at all: the connection's audio runs as one :class:`TurnStream`."""
    return ManualTurns()


# ---------------------------------------------------------------------------- items and work


@dataclass(eq=False)
class Item:
    """One user turn: the audio between two commits, and its stream (made in the worker)."""

    id: str
    rate: int
    config: StreamConfig
    turns: TurnPolicy
    accepted_samples: int = 0  # input samples accepted (at ``rate``)
    dropped: str | None = None  # why pending work is skipped (a ``metrics.DROP_REASONS`` key): cleared, ...
    failed: bool = False
    stream: StreamSession | None = None
    resampler: StreamResampler | None = None
    deltas: list[str] = field(default_factory=list)
    interim: str = ""
    carry: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # 16 kHz, less than a block
    fed: int = 0  # 16 kHz samples fed to the stream


@dataclass
class ItemChain:
    """The connection's last committed item (``previous_item_id``): written on the event loop
    by client commits, in the worker by turn ends."""

    last: str | None = None


@dataclass(eq=False)
class Turn:
    """The open speech turn of a :class:`TurnStream`: the item it becomes."""

    id: str
    start_ms: float = 0.0  # ms of the stream (its SpeechStarted)
    deltas: list[str] = field(default_factory=list)
    interim: str = ""


@dataclass(eq=False)
class TurnStream:
    """``server_vad`` / ``semantic_vad``: a connection's audio as one stream with turn detection
    (the stream and its state are made and used in the worker only; the event loop sets
    ``dropped``). A client commit ends the stream (``finish``) and the next audio starts a new
    one, ``offset`` samples later; times in events are ms of the session's audio
    (``origin_ms`` of it came before this stream: earlier streams, cleared audio)."""

    rate: int
    config: StreamConfig  # with ``turns``
    origin_ms: float
    chain: ItemChain
    accepted_samples: int = 0  # input samples accepted (at ``rate``)
    dropped: str | None = None  # why pending work is skipped (a ``metrics.DROP_REASONS`` key): cleared, ...
    stream: StreamSession | None = None
    resampler: StreamResampler | None = None
    carry: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # 16 kHz, less than a block
    fed: int = 0  # 16 kHz samples fed to streams
    offset: int = 0  # 16 kHz samples fed to this TurnStream's earlier streams
    turn: Turn | None = None

    def ms(self, stream_ms: float) -> int:
        """A time of the current stream in ms of the session's audio."""
        return int(round(self.origin_ms + self.offset * 1000 / SAMPLE_RATE + stream_ms))

    @property
    def shift_s(self) -> float:
        return self.ms(0) / 1000


@dataclass(eq=False)
class Work:
    """``append`` (samples at the item's rate) or ``commit`` for one item or turn stream; ``end``
    for a turn stream (its settings changed: the open turn completes, nothing more comes) and
    ``clear`` (its open turn is dropped, nothing more comes)."""

    kind: str
    item: Item | TurnStream
    pcm: np.ndarray | None = None
    event_id: str | None = None  # the client event's, for an error the worker reports

    @property
    def audio_s(self) -> float:
        return 0.0 if self.pcm is None else len(self.pcm) / self.item.rate


@dataclass
class WorkResult:
    events: list[dict[str, Any]]
    signals: list[TurnSignal]
