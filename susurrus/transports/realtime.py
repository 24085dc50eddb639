"""The OpenAI Realtime *transcription* protocol, without a socket.

:class:`RealtimeSession` holds one connection's protocol state and turns each client message into
server events to send now and :class:`Work` to run on the model; :class:`Transcriber` runs that
work (in a worker thread, off the event loop) and returns the events it produced. The server
(``server.py``) only moves messages between a WebSocket, these two and a thread pool, so every
rule below is testable by calling methods.

Client events: ``session.update`` (GA: ``session.type = "transcription"``,
``session.audio.input.{format, transcription, turn_detection}``) and the beta
``transcription_session.update`` (flat ``input_audio_format``, ``input_audio_transcription``,
``turn_detection``); ``input_audio_buffer.append`` / ``commit`` / ``clear``.

Server events: ``session.created`` / ``session.updated`` (``transcription_session.*`` for beta
clients), ``input_audio_buffer.committed`` / ``cleared``,
``conversation.item.input_audio_transcription.delta`` / ``completed`` / ``failed``, ``error``; and
extension events that standard clients ignore: ``susurrus.interim`` (the dimmed guess after the
committed text), ``susurrus.words`` (committed words with times) and ``susurrus.warning``.

Semantics (``turn_detection: null``, the client commits): the first audio appended after a
commit starts an *item* with its own :class:`~susurrus.streaming.session.StreamSession`; audio is
transcribed as it arrives, so committed text streams out as ``delta`` events while the user is
still speaking; ``input_audio_buffer.commit`` ends the item (``committed`` at once, then the
last deltas and ``completed`` with the whole transcript); ``clear`` drops the uncommitted item.

With ``turn_detection: {type: "server_vad" | "semantic_vad"}`` the connection's audio goes through
one stream with turn detection (:class:`TurnStream`; the stream's ``turns``): each speech turn is
an item, opened at ``input_audio_buffer.speech_started`` (its ``item_id`` is allocated there),
its committed text streamed as ``delta`` events, ended at ``speech_stopped`` (then
``input_audio_buffer.committed``, the turn's last deltas and ``completed``). Audio times are ms
of the session's audio. ``commit`` forces the end of the open turn; ``clear`` drops the turn open
at that point of the audio (never committed), and only it: it is run in order with the audio,
so every turn that ended before it is transcribed however far the model is behind, and
``input_audio_buffer.cleared`` follows everything the earlier audio caused (a commit then a
clear, as the OpenAI Agents SDK ends its input, keeps the committed turn).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import numpy as np

from susurrus.audio.resampler import StreamResampler
from susurrus.streaming.session import (
    Committed,
    Interim,
    StreamConfig,
    StreamWord,
    TurnEnded,
)
from susurrus.streaming.vad import SpeechStarted, SpeechStopped
from susurrus.transports.metrics import Metrics
from susurrus.transports.realtime_items import (
    SAMPLE_RATE,
    Item,
    ItemChain,
    Turn,
    TurnSignal,
    TurnStream,
    Work,
    WorkResult,
    turn_policy_for,
)
from susurrus.transports.realtime_protocol import (
    COMMIT_EMPTY,
    TRANSCRIPTION_FAILED,
    TURNS_LOCKED,
    UNKNOWN_EVENT,
    UNSUPPORTED_EVENT,
    ProtocolError,
    decode_pcm16,
    error_event,
    new_id,
    parse_client_event,
    server_event,
)
from susurrus.transports.realtime_settings import Limits, SessionSettings, apply_update, session_object
from susurrus.transports.workers import compute_clock


class Transcriber:
    """Runs :class:`Work` on the shared model (in a worker thread). One call at a time per session
    (the server runs each session's work in order), any number of sessions at once.

    ``model`` is anything with ``stream(**settings)``: a :class:`~susurrus.api.WhisperModel`, or a
    :class:`~susurrus.transports.workers.WorkerPool` whose streams live in worker processes (they
    are closed explicitly: at an item's end, on failure, and by :meth:`close`)."""

    def __init__(self, model: Any, metrics: Metrics, extensions: bool = True):
        self.model = model
        self.metrics = metrics
        self.extensions = extensions
        self._streaming: weakref.WeakSet[Item | TurnStream] = weakref.WeakSet()  # items that had a stream

    def _open(self, target: Item | TurnStream) -> Any:
        target.stream = self.model.stream(**_stream_kwargs(target.config))
        self._streaming.add(target)
        return target.stream

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
            target.dropped = True
            self._release(target)

    def run(self, work: Work) -> WorkResult:
        item = work.item
        if isinstance(item, TurnStream):
            return self._run_turns(work, item)
        if item.dropped or item.failed:
            self.metrics.dropped(work.audio_s)
            return WorkResult([], [])
        t0 = compute_clock()
        events: list[dict[str, Any]] = []
        signals: list[TurnSignal] = []
        fed_s = 0.0
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
                fed_s = len(samples) / SAMPLE_RATE
                signals = item.turns.observe(samples, (item.fed + len(item.carry)) / SAMPLE_RATE)
                events += self._feed(item, samples, final=False, latencies=latencies)
            elif work.kind == "commit":
                tail = resampler.flush()
                fed_s = len(tail) / SAMPLE_RATE
                events += self._feed(item, tail, final=True, latencies=latencies)
                events += self._events(item, stream.finish(), latencies)
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
            self.metrics.error("server_error", TRANSCRIPTION_FAILED)
            events.append(server_event(
                "conversation.item.input_audio_transcription.failed", item_id=item.id, content_index=0,
                error={"type": "server_error", "code": TRANSCRIPTION_FAILED,
                       "message": f"transcription failed: {type(err).__name__}: {err}", "param": None}))
        self.metrics.processed(fed_s, compute_clock() - t0, latencies)
        return WorkResult(events, signals)

    def _feed(self, item: Item | TurnStream, samples: np.ndarray, final: bool, latencies: list[float]
              ) -> list[dict[str, Any]]:
        """Feed the stream whole ``chunk_ms`` blocks, one per call, as ``susurrus stream`` does:
        a step then reads exactly its block's audio, so the text does not depend on how the
        client cut its appends (the rest waits for the next append, or the commit)."""
        assert item.stream is not None
        audio = np.concatenate([item.carry, samples]) if len(item.carry) else samples
        block = item.config.chunk_ms * SAMPLE_RATE // 1000
        whole = len(audio) if final else len(audio) - len(audio) % block
        events: list[dict[str, Any]] = []
        for i in range(0, whole, block):
            new = item.stream.feed(audio[i:min(i + block, whole)])
            events += (self._turn_events(item, new, latencies) if isinstance(item, TurnStream)
                       else self._events(item, new, latencies))
        item.carry = audio[whole:].copy()
        item.fed += whole
        return events

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
                    out.append(server_event("susurrus.words", item_id=item.id, words=[
                        {"word": w.word, "start": w.start, "end": w.end, "emitted_at": w.emitted_at,
                         "probability": w.probability} for w in ev.words]))
            elif isinstance(ev, Interim) and self.extensions and ev.text != item.interim:
                item.interim = ev.text
                out.append(server_event("susurrus.interim", item_id=item.id, text=ev.text,
                                        audio_time=round(ev.audio_time, 3)))
        return out


    # ------------------------------------------------------------------ server turn detection

    def _run_turns(self, work: Work, ts: TurnStream) -> WorkResult:
        if ts.dropped:
            self.metrics.dropped(work.audio_s)
            return WorkResult([], [])
        t0 = compute_clock()
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
                fed_s = len(samples) / SAMPLE_RATE
                events += self._feed(ts, samples, final=False, latencies=latencies)
            elif work.kind == "clear":
                # the turn open at this point of the audio is dropped (no committed/completed), with
                # the audio not fed yet; turns that ended before it were completed by earlier work
                if ts.stream is not None:
                    open_s = (ts.stream.audio_time - ts.turn.start_ms / 1000) if ts.turn is not None else 0.0
                    self.metrics.dropped(len(ts.carry) / SAMPLE_RATE + max(0.0, open_s))
                    self._release(ts)
                ts.turn, ts.carry, ts.dropped = None, np.zeros(0, np.float32), True
                events.append(server_event("input_audio_buffer.cleared"))
            else:  # commit or end
                tail = ts.resampler.flush() if work.kind == "end" else np.zeros(0, np.float32)
                fed_s = len(tail) / SAMPLE_RATE
                if ts.stream is None and (len(ts.carry) or len(tail)):
                    self._open(ts)
                if ts.stream is not None:  # the audio not fed yet (it may open a turn)
                    events += self._feed(ts, tail, final=True, latencies=latencies)
                if work.kind == "commit" and ts.turn is None:
                    # nothing to commit: server turn detection commits each turn when its speech stops
                    self.metrics.error("invalid_request_error", COMMIT_EMPTY)
                    events.append(error_event(ProtocolError(
                        COMMIT_EMPTY, "input audio buffer holds no speech to commit: with server turn detection "
                                      "each turn is committed when its speech stops", event_id=work.event_id)))
                elif ts.stream is not None:
                    # a client commit (or new settings) ends the open turn here: the stream finishes
                    # (its turn completes) and the next audio starts a new one
                    events += self._turn_events(ts, ts.stream.finish(), latencies)
                    ts.offset += ts.stream.samples_fed
                    self._release(ts)
        except Exception as err:  # noqa: BLE001 - a failed turn must not take the session down
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
        self.metrics.processed(fed_s, compute_clock() - t0, latencies)
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
             "emitted_at": round(w.emitted_at + shift_s, 3), "probability": w.probability} for w in words]


def _stream_kwargs(cfg: StreamConfig) -> dict[str, Any]:
    """``model.stream`` arguments that rebuild exactly ``cfg`` (shallow: ``turns`` stays a TurnConfig)."""
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


# ---------------------------------------------------------------------------- the session


class RealtimeSession:
    """One connection's protocol state (runs on the event loop; cheap calls only).

    ``receive(message)`` returns the events to send at once and the work to queue, in order;
    the server calls ``done(work)`` when the worker has run it. Errors become ``error`` events
    (also counted in ``metrics``) and never end the session."""

    def __init__(self, *, model_name: str, multilingual: bool, limits: Limits, metrics: Metrics,
                 dialect: str = "ga", extensions: bool = True):
        self.model_name = model_name
        self.multilingual = multilingual
        self.limits = limits
        self.metrics = metrics
        self.dialect = dialect  # "ga" or "beta": the names of the session events
        self.extensions = extensions
        self.id = new_id("sess")
        self.settings = SessionSettings()
        self.item: Item | None = None  # the uncommitted item, once audio arrived (no server turn detection)
        self.turns: TurnStream | None = None  # server turn detection: the stream, once audio arrived
        self.chain = ItemChain()
        self.pending_s = 0.0  # accepted audio not yet transcribed
        self.accepted_s = 0.0  # all audio accepted in the session (the clock of speech_started/stopped)

    @property
    def previous_item_id(self) -> str | None:
        return self.chain.last

    def opening_events(self) -> list[dict[str, Any]]:
        name = "transcription_session.created" if self.dialect == "beta" else "session.created"
        return [server_event(name, session=self._session())]

    def _session(self, dialect: str | None = None) -> dict[str, Any]:
        return session_object(self.settings, dialect=dialect or self.dialect, session_id=self.id,
                              model_name=self.model_name)

    def receive(self, data: str | bytes | None) -> tuple[list[dict[str, Any]], list[Work]]:
        try:
            event = parse_client_event(data, self.limits.max_message_bytes)
            return self._handle(event)
        except ProtocolError as err:
            self.metrics.error(err.type, err.code)
            return [error_event(err)], []

    def _handle(self, event: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Work]]:
        kind = event["type"]
        event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            if kind in ("session.update", "transcription_session.update"):
                return self._update(event, "beta" if kind.startswith("transcription_session") else "ga")
            if kind == "input_audio_buffer.append":
                return [], self._append(event)
            if kind == "input_audio_buffer.commit":
                return self.commit(event_id)
            if kind == "input_audio_buffer.clear":
                return self.clear()
            if kind.startswith(("response.", "conversation.", "output_audio_buffer.")):
                raise ProtocolError(UNSUPPORTED_EVENT, f"{kind!r} is not supported in a transcription session "
                                                       "(only session.update, transcription_session.update and "
                                                       "input_audio_buffer.append/commit/clear)", "type")
            raise ProtocolError(UNKNOWN_EVENT, f"unknown event type {kind!r}", "type")
        except ProtocolError as err:
            err.event_id = err.event_id or event_id
            raise

    def _update(self, event: dict[str, Any], dialect: str) -> tuple[list[dict[str, Any]], list[Work]]:
        buffered = self.item is not None and self.item.accepted_samples > 0
        before = self.settings
        updated = apply_update(before, event, multilingual=self.multilingual, buffered_audio=buffered)
        if buffered and updated.server_turns:
            raise ProtocolError(TURNS_LOCKED, "server turn detection cannot start while the buffer holds "
                                              "uncommitted audio: commit or clear it first",
                                "session.audio.input.turn_detection")
        self.settings = updated
        works: list[Work] = []
        ts = self.turns
        if ts is not None and (not updated.server_turns or updated.rate != ts.rate
                               or updated.stream_config() != ts.config):
            # new stream settings: the open turn completes here, the next audio starts a new stream
            works.append(Work("end", ts))
            self.turns = None
        name = "transcription_session.updated" if dialect == "beta" else "session.updated"
        return [server_event(name, session=self._session(dialect))], works

    def _append(self, event: dict[str, Any]) -> list[Work]:
        pcm = decode_pcm16(event.get("audio"))
        if not len(pcm):
            return []
        seconds = len(pcm) / self.settings.rate
        target: Item | TurnStream
        if self.settings.server_turns:
            target = self._turn_stream()
        else:
            if self.item is None:
                self.item = Item(new_id("item"), self.settings.rate, self.settings.stream_config(),
                                 turn_policy_for(self.settings.turn_detection))
            target = self.item
        target.accepted_samples += len(pcm)
        self.pending_s += seconds
        self.accepted_s += seconds
        return [Work("append", target, pcm)]

    def _turn_stream(self) -> TurnStream:
        if self.turns is None:
            self.turns = TurnStream(self.settings.rate, self.settings.stream_config(), self.accepted_s * 1000,
                                    self.chain)
        return self.turns

    def commit(self, event_id: str | None = None) -> tuple[list[dict[str, Any]], list[Work]]:
        if self.settings.server_turns:
            # ends the open turn, if any: the worker knows, in order with the audio, and sends
            # committed and completed, or the error when no turn is open (also after everything
            # earlier audio caused: a client can wait for it)
            return [], [Work("commit", self._turn_stream(), event_id=event_id)]
        item = self.item
        if item is None or item.accepted_samples == 0:
            raise ProtocolError(COMMIT_EMPTY, "input audio buffer is empty: append audio before committing")
        events = [server_event("input_audio_buffer.committed", item_id=item.id,
                               previous_item_id=self.chain.last)]
        self.chain.last = item.id
        self.item = None
        return events, [Work("commit", item)]

    def clear(self) -> tuple[list[dict[str, Any]], list[Work]]:
        if self.item is not None:
            self.item.dropped = True  # queued appends for it are skipped by the worker
            self.item = None
        if self.settings.server_turns:
            # in order with the audio: the turns that end before this point are completed however
            # far behind the model is, the one open here is dropped, and ``cleared`` comes after
            # all that (from the worker); the next audio starts a new stream
            work = Work("clear", self._turn_stream())
            self.turns = None
            return [], [work]
        return [server_event("input_audio_buffer.cleared")], []

    def turn(self, signal: TurnSignal) -> tuple[list[dict[str, Any]], list[Work]]:
        """A turn-detection signal from the worker: speech_started/stopped events, and a commit."""
        item = self.item
        if item is None:
            return [], []
        events = [server_event(f"input_audio_buffer.{signal.kind}", item_id=item.id,
                               audio_start_ms=signal.audio_ms) if signal.kind == "speech_started" else
                  server_event(f"input_audio_buffer.{signal.kind}", item_id=item.id, audio_end_ms=signal.audio_ms)]
        if signal.commit:
            more, works = self.commit()
            return events + more, works
        return events, []

    @property
    def has_room(self) -> bool:
        """Whether the server may read the client's next message: less than ``max_buffered_s``
        of accepted audio awaits the model. When not, the server stops reading the socket until
        the worker catches up (flow control: TCP slows the sender; no append is ever refused)."""
        return self.pending_s < self.limits.max_buffered_s

    def done(self, work: Work) -> None:
        if work.kind == "append":
            self.pending_s = max(0.0, self.pending_s - work.audio_s)

    def close(self, pending: Iterable[Work]) -> None:
        """The connection ended: drop everything not yet transcribed."""
        if self.item is not None:
            self.item.dropped = True
        if self.turns is not None:
            self.turns.dropped = True
        for work in pending:
            work.item.dropped = True
            self.metrics.dropped(work.audio_s)
