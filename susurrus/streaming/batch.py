"""Many live streams of one model, stepped together (a call recorder, a server's worker).

::

    batch = model.streams()                 # owns the model, hands out streams
    calls = {batch.stream(): None for _ in range(32)}
    events = batch.feed({stream: pcm, ...})  # every stream's new audio, one call
    last = batch.finish(list(calls))

``feed`` runs each stream's ``feed_steps`` (the same step as ``stream.feed``, its model calls
yielded) in one :class:`~susurrus.streaming.calls.Lockstep`: the encoder passes of every stream
whose step is due run as one packed pass, then the decoder passes of all streams still decoding,
and so on, so the weights are read and the per-layer overhead is paid once per round, not once
per stream. A stream's text is the text it gets alone, except where a different summation
order flips a near-tie (``tests/test_batched.py``, docs/benchmarks.md). A stream that fails
(bad audio, a finished stream) raises for itself: the others' events are still returned, and
the failures are raised together after the round as :class:`BatchError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from susurrus.streaming.calls import KindCost, Lockstep, Steps
from susurrus.streaming.events import Event
from susurrus.streaming.session import StreamSession


class BatchError(RuntimeError):
    """Some streams of a batched call failed: ``errors`` maps each to its exception;
    ``events`` holds what the other streams returned (nothing of theirs is lost)."""

    def __init__(self, errors: dict[StreamSession, BaseException], events: dict[StreamSession, list[Event]]):
        first = next(iter(errors.values()))
        super().__init__(f"{len(errors)} of {len(errors) + len(events)} streams failed; the first: "
                         f"{type(first).__name__}: {first}")
        self.errors = errors
        self.events = events


class StreamBatch:
    """Streams of one model stepped together. Not thread-safe: one caller drives it."""

    def __init__(self, model: Any):
        self.model = model
        self._lockstep = Lockstep(model.net)

    @property
    def calls_per_round(self) -> float:
        """Model calls per packed round so far: how many streams a round carried on average."""
        return self._lockstep.calls / max(1, self._lockstep.rounds)

    @property
    def costs(self) -> dict[str, KindCost]:
        """What each kind of model call (``EncodeFrames``, ``DecodeTokens``, ...) cost so far:
        thread seconds, passes, calls. The rest of the streams' compute is their own Python."""
        return self._lockstep.costs

    def stream(self, latency: str | None = None, **settings: Any) -> StreamSession:
        """A new stream (the arguments of ``WhisperModel.stream``). It can still be fed alone
        (``stream.feed``) between batched calls."""
        return self.model.stream(latency, **settings)

    def _run(self, work: dict[StreamSession, Steps[list[Event]]],
             refused: dict[StreamSession, BaseException]) -> dict[StreamSession, list[Event]]:
        events: dict[StreamSession, list[Event]] = {}
        errors = dict(refused)

        def ender(stream: StreamSession):
            def done(value: Any, error: BaseException | None, compute_s: float) -> None:
                if error is not None:
                    errors[stream] = error
                else:
                    events[stream] = value
            return done

        for stream, steps in work.items():
            self._lockstep.add(steps, ender(stream))
        while self._lockstep.round():
            pass
        if errors:
            raise BatchError(errors, events)
        return events

    def _own(self, stream: StreamSession) -> None:
        if not isinstance(stream, StreamSession) or stream.net is not self.model.net:
            raise ValueError(f"{stream!r} is not a stream of this batch's model")

    def feed(self, pieces: Mapping[StreamSession, np.ndarray]) -> dict[StreamSession, list[Event]]:
        """Append each stream's audio (16 kHz mono, float32 or int16), the streams stepped
        together; each stream's new events."""
        work, refused = {}, {}
        for stream, pcm in pieces.items():
            self._own(stream)
            try:
                work[stream] = stream.feed_steps(pcm)
            except (ValueError, TypeError, RuntimeError) as err:  # bad audio, a finished stream
                refused[stream] = err
        return self._run(work, refused)

    def finish(self, streams: Iterable[StreamSession]) -> dict[StreamSession, list[Event]]:
        """End each stream's audio, together; each stream's last events."""
        work = {}
        for stream in streams:
            self._own(stream)
            work[stream] = stream.finish_steps()
        return self._run(work, {})
