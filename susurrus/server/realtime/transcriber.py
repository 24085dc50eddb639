"""The model side of a Realtime session: :class:`Transcriber` runs the session's :class:`Work` (in a
worker thread, off the event loop), feeds each item's or turn stream's audio to its
:class:`~susurrus.streaming.session.StreamSession` in whole ``chunk_ms`` blocks, and maps the
stream's events onto protocol events (``delta``, ``completed``, ``failed``, the turn events, the
``susurrus.*`` extensions)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import fields
from typing import Any

import numpy as np

from susurrus.audio.resampler import StreamResampler
from susurrus.server.metrics import Metrics
from susurrus.server.realtime.items import SAMPLE_RATE, Item, Turn, TurnSignal, TurnStream, Work, WorkResult
from susurrus.server.realtime.protocol import (
    COMMIT_EMPTY,
    TRANSCRIPTION_FAILED,
    ProtocolError,
    error_event,
    new_id,
    server_event,
)
from susurrus.server.workers.pool import RemoteStream, compute_clock
from susurrus.streaming.session import Committed, Interim, StreamConfig, StreamWord, TurnEnded
from susurrus.streaming.vad import SpeechStarted, SpeechStopped

_steps = threading.local()


def step_clock() -> int:
    """Engine steps this thread's streams have run (:attr:`StreamSession.steps`, also for streams
    in worker processes): the difference of two readings is the steps a piece of work ran, beside
    :func:`~susurrus.server.workers.pool.compute_clock`'s compute, for ``/metrics``."""
    return getattr(_steps, "count", 0)


def _stepped(stream: Any, method: str, *args: Any) -> Any:
    """``stream.feed(...)`` / ``stream.finish()``, counting the steps it ran on :func:`step_clock`."""
    before = getattr(stream, "steps", 0)
    try:
        return getattr(stream, method)(*args)
    finally:
        _steps.count = step_clock() + getattr(stream, "steps", 0) - before


class Transcriber:
    """Runs :class:`Work` on the shared model (in a worker thread). One call at a time per session
    (the server runs each session's work in order), any number of sessions at once.

    ``model`` is anything with ``stream(**settings)``: a :class:`~susurrus.api.WhisperModel`, or a
    :class:`~susurrus.server.workers.pool.WorkerPool` whose streams live in worker processes (they
    are closed explicitly: at an item's end, on failure, and by :meth:`close`)."""

    def __init__(self, model: Any, metrics: Metrics, extensions: bool = True):
        self.model = model
        self.metrics = metrics
        self.extensions = extensions
        self._streaming: weakref.WeakSet[Item | TurnStream] = weakref.WeakSet()  # items that had a stream
        self._speakers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # the last speaker announced

    def _open(self, target: Item | TurnStream) -> Any:
        target.stream = self.model.stream(**_stream_kwargs(target.config))
        self._streaming.add(target)
        return target.stream

    def _speaker_change(self, target: Item | TurnStream, item_id: str, ev: Committed,
                        shift_s: float = 0.0) -> list[dict[str, Any]]:
        """``susurrus.speaker`` when a session with speaker labels hears another speaker."""
        if ev.speaker is None or self._speakers.get(target) == ev.speaker:
            return []
        self._speakers[target] = ev.speaker
        return [server_event("susurrus.speaker", item_id=item_id, speaker=ev.speaker,
                             start=round(ev.words[0].start + shift_s, 3))]

    @staticmethod
    def _release(target: Item | TurnStream) -> None:
        """Drop ``target``'s stream and free it (in its worker process, if it has one)."""
        stream, target.stream = target.stream, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        """The connection ended: free every stream its items still hold (call it after the last
        :meth:`run` returned; later work is dropped)."""
        for target in list(self._streaming):
            target.dropped = target.dropped or "client_gone"
            self._release(target)

    def run(self, work: Work) -> WorkResult:
        item = work.item
        if isinstance(item, TurnStream):
            return self._run_turns(work, item)
        if item.dropped or item.failed:
            self.metrics.dropped(work.audio_s, "failed" if item.failed else item.dropped or "client_gone")
            return WorkResult([], [])
        t0, s0 = compute_clock(), step_clock()
        events: list[dict[str, Any]] = []
        signals: list[TurnSignal] = []
        fed_s = 0.0  # seconds of the client's audio run through the model (the commit's tail was counted by its append)
        latencies: list[float] = []
        try:
            if item.stream is None:
                self._open(item)
                item.resampler = StreamResampler(item.rate, SAMPLE_RATE)
            stream, resampler = item.stream, item.resampler
            assert resampler is not None
            if work.kind == "append":
                assert work.pcm is not None
                samples = resampler.process(work.pcm.astype(np.float32) / 32768.0)
                signals = item.turns.observe(samples, (item.fed + len(item.carry)) / SAMPLE_RATE)
                events += self._feed(item, samples, final=False, latencies=latencies)
                fed_s = work.audio_s
            elif work.kind == "commit":
                # the audio not fed yet and the end in one request (a worker runs it before other
                # streams' steps): the commit waits for its own decode only
                pieces = self._pieces(item, resampler.flush(), final=True)
                if isinstance(stream, RemoteStream):
                    events += self._events(item, _stepped(stream, "finish", pieces), latencies)
                else:
                    for piece in pieces:
                        events += self._events(item, _stepped(stream, "feed", piece), latencies)
                    events += self._events(item, _stepped(stream, "finish"), latencies)
                events.append(server_event(
                    "conversation.item.input_audio_transcription.completed", item_id=item.id, content_index=0,
                    transcript="".join(item.deltas),
                    usage={"type": "duration", "seconds": round(stream.audio_time, 3)}))
                with self.metrics.lock:
                    self.metrics.items_completed += 1
                self._release(item)  # the item is done: free its caches
        except Exception as err:  # noqa: BLE001 - a failed item must not take the session down
            item.failed = True
            self._release(item)
            self.metrics.dropped(work.audio_s - fed_s, "failed")
            self.metrics.error("server_error", TRANSCRIPTION_FAILED)
            events.append(server_event(
                "conversation.item.input_audio_transcription.failed", item_id=item.id, content_index=0,
                error={"type": "server_error", "code": TRANSCRIPTION_FAILED,
                       "message": f"transcription failed: {type(err).__name__}: {err}", "param": None}))
        self.metrics.processed(fed_s, compute_clock() - t0, latencies, step_clock() - s0)
        return WorkResult(events, signals)

    def _feed(self, item: Item | TurnStream, samples: np.ndarray, final: bool, latencies: list[float]
              ) -> list[dict[str, Any]]:
        """Feed the stream whole ``chunk_ms`` blocks, one per call, as ``susurrus stream`` does:
        a step then reads exactly its block's audio, so the text does not depend on how the
        client cut its appends (the rest waits for the next append, or the commit); a turn
        stream is fed all its audio as it comes (:meth:`_pieces`)."""
        assert item.stream is not None
        events: list[dict[str, Any]] = []
        for piece in self._pieces(item, samples, final):
            new = _stepped(item.stream, "feed", piece)
            events += (self._turn_events(item, new, latencies) if isinstance(item, TurnStream)
                       else self._events(item, new, latencies))
        return events

    @staticmethod
    def _pieces(item: Item | TurnStream, samples: np.ndarray, final: bool) -> list[np.ndarray]:
        """``samples`` after the carried audio in whole ``chunk_ms`` blocks (``final``: the rest
        too); what is left is carried to the next call, and ``item.fed`` counts the pieces.

        A turn stream takes all its audio at once: a stream with turns cuts what it is fed at
        every VAD frame's end and step boundary itself (``StreamSession.feed_steps``), so its
        text does not depend on the pieces, and the silence that ends a turn is heard as soon as
        it arrives, not up to a block (640 ms at the medium preset) later."""
        audio = np.concatenate([item.carry, samples]) if len(item.carry) else samples
        block = item.config.step_samples
        whole = len(audio) if final or isinstance(item, TurnStream) else len(audio) - len(audio) % block
        item.carry = audio[whole:].copy()
        item.fed += whole
        return [audio[i:min(i + block, whole)] for i in range(0, whole, block)]

    def _events(self, item: Item, stream_events: list, latencies: list[float]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in stream_events:
            if isinstance(ev, Committed):
                text = ev.text if item.deltas else ev.text.lstrip()
                if not text:
                    continue
                item.deltas.append(text)
                latencies.extend(max(0.0, w.emitted_at - w.end) for w in ev.words)
                out.append(server_event("conversation.item.input_audio_transcription.delta", item_id=item.id,
                                        content_index=0, delta=text))
                if self.extensions:
                    out.extend(self._speaker_change(item, item.id, ev))
                    out.append(server_event("susurrus.words", item_id=item.id, words=[
                        {"word": w.word, "start": w.start, "end": w.end, "emitted_at": w.emitted_at,
                         "probability": w.probability, **({"speaker": w.speaker} if w.speaker else {})}
                        for w in ev.words]))
            elif isinstance(ev, Interim) and self.extensions and ev.text != item.interim:
                item.interim = ev.text
                out.append(server_event("susurrus.interim", item_id=item.id, text=ev.text,
                                        audio_time=round(ev.audio_time, 3)))
        return out


    # ------------------------------------------------------------------ server turn detection

    def _run_turns(self, work: Work, ts: TurnStream) -> WorkResult:
        if ts.dropped:
            self.metrics.dropped(work.audio_s, ts.dropped)
            return WorkResult([], [])
        t0, s0 = compute_clock(), step_clock()
        events: list[dict[str, Any]] = []
        fed_s = 0.0
        latencies: list[float] = []
        try:
            if ts.resampler is None:
                ts.resampler = StreamResampler(ts.rate, SAMPLE_RATE)
            if work.kind == "append":
                assert work.pcm is not None
                if ts.stream is None:
                    self._open(ts)
                samples = ts.resampler.process(work.pcm.astype(np.float32) / 32768.0)
                events += self._feed(ts, samples, final=False, latencies=latencies)
                fed_s = work.audio_s
            elif work.kind == "clear":
                # the turn open at this point of the audio is dropped (no committed/completed), with
                # the audio not fed yet; turns that ended before it were completed by earlier work.
                # Its audio was run through the model (its deltas were sent): it counts as transcribed
                if ts.stream is not None:
                    self._release(ts)
                ts.turn, ts.carry, ts.dropped = None, np.zeros(0, np.float32), "cleared"
                events.append(server_event("input_audio_buffer.cleared"))
            else:  # commit or end
                tail = ts.resampler.flush() if work.kind == "end" else np.zeros(0, np.float32)
                if ts.stream is None and (len(ts.carry) or len(tail)):
                    self._open(ts)
                if ts.stream is not None:  # the audio not fed yet (it may open a turn)
                    events += self._feed(ts, tail, final=True, latencies=latencies)
                if work.kind == "commit" and ts.turn is None:
                    # nothing to commit: server turn detection commits each turn when its speech stops
                    self.metrics.error("invalid_request_error", COMMIT_EMPTY)
                    events.append(error_event(ProtocolError(
                        COMMIT_EMPTY, "input audio buffer holds no speech to commit: with server turn detection "
                                      "(the default, as OpenAI's) each turn is committed when its speech stops; "
                                      "to commit turns yourself, set turn_detection to null",
                        event_id=work.event_id)))
                elif ts.stream is not None:
                    # a client commit (or new settings) ends the open turn here: the stream finishes
                    # (its turn completes) and the next audio starts a new one
                    events += self._turn_events(ts, _stepped(ts.stream, "finish"), latencies)
                    ts.offset += ts.stream.samples_fed
                    self._release(ts)
        except Exception as err:  # noqa: BLE001 - a failed turn must not take the session down
            self.metrics.dropped(work.audio_s - fed_s, "failed")
            self.metrics.error("server_error", TRANSCRIPTION_FAILED)
            error = {"type": "server_error", "code": TRANSCRIPTION_FAILED,
                     "message": f"transcription failed: {type(err).__name__}: {err}", "param": None}
            if ts.turn is not None:
                events.append(server_event("conversation.item.input_audio_transcription.failed",
                                           item_id=ts.turn.id, content_index=0, error=error))
            else:
                events.append(server_event("error", error={**error, "event_id": None}))
            if ts.stream is not None:  # start afresh with the next audio
                ts.offset += ts.stream.samples_fed
                self._release(ts)
            ts.turn, ts.carry = None, np.zeros(0, np.float32)
        self.metrics.processed(fed_s, compute_clock() - t0, latencies, step_clock() - s0)
        return WorkResult(events, [])

    def _turn_events(self, ts: TurnStream, stream_events: list, latencies: list[float]) -> list[dict[str, Any]]:
        """Stream events with ``turns`` onto protocol events: a turn is an item."""
        out: list[dict[str, Any]] = []
        for ev in stream_events:
            if isinstance(ev, SpeechStarted):
                ts.turn = Turn(new_id("item"), ev.audio_start_ms)
                out.append(server_event("input_audio_buffer.speech_started", audio_start_ms=ts.ms(ev.audio_start_ms),
                                        item_id=ts.turn.id))
            elif isinstance(ev, SpeechStopped):
                if ts.turn is None:
                    continue
                out.append(server_event("input_audio_buffer.speech_stopped", audio_end_ms=ts.ms(ev.audio_end_ms),
                                        item_id=ts.turn.id))
                out.append(server_event("input_audio_buffer.committed", item_id=ts.turn.id,
                                        previous_item_id=ts.chain.last))
                ts.chain.last = ts.turn.id
            elif isinstance(ev, TurnEnded):
                if ts.turn is None:
                    continue
                out.append(server_event(
                    "conversation.item.input_audio_transcription.completed", item_id=ts.turn.id, content_index=0,
                    transcript=ev.text,
                    usage={"type": "duration", "seconds": round((ev.audio_end_ms - ev.audio_start_ms) / 1000, 3)}))
                with self.metrics.lock:
                    self.metrics.items_completed += 1
                ts.turn = None
            elif isinstance(ev, Committed):
                latencies.extend(max(0.0, w.emitted_at - w.end) for w in ev.words)
                turn = ts.turn
                if turn is None:  # words outside a turn (not expected: the gate and turns share a threshold)
                    continue
                text = ev.text if turn.deltas else ev.text.lstrip()
                if not text:
                    continue
                turn.deltas.append(text)
                out.append(server_event("conversation.item.input_audio_transcription.delta", item_id=turn.id,
                                        content_index=0, delta=text))
                if self.extensions:
                    out.extend(self._speaker_change(ts, turn.id, ev, ts.shift_s))
                    out.append(server_event("susurrus.words", item_id=turn.id,
                                            words=_word_dicts(ev.words, ts.shift_s)))
            elif isinstance(ev, Interim) and self.extensions and ts.turn is not None \
                    and ev.text != ts.turn.interim:
                ts.turn.interim = ev.text
                out.append(server_event("susurrus.interim", item_id=ts.turn.id, text=ev.text,
                                        audio_time=round(ts.shift_s + ev.audio_time, 3)))
        return out


def _word_dicts(words: list[StreamWord], shift_s: float = 0.0) -> list[dict[str, Any]]:
    return [{"word": w.word, "start": round(w.start + shift_s, 3), "end": round(w.end + shift_s, 3),
             "emitted_at": round(w.emitted_at + shift_s, 3), "probability": w.probability,
             **({"speaker": w.speaker} if w.speaker else {})} for w in words]


def _stream_kwargs(cfg: StreamConfig) -> dict[str, Any]:
    """``model.stream`` arguments that rebuild exactly ``cfg`` (shallow: ``turns`` stays a TurnConfig)."""
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
