"""The OpenAI Realtime *transcription* protocol, without a socket.

:class:`RealtimeSession` (here) holds one connection's protocol state and turns each client message
into server events to send now and ``Work`` to run on the model; ``Transcriber`` runs that work (in
a worker thread, off the event loop) and returns the events it produced. The server
(``server.py``) only moves messages between a WebSocket, these two and a thread pool, so every
rule below is testable by calling methods. Beside this module: ``realtime_protocol.py`` (messages
in and out, error codes), ``realtime_settings.py`` (``session.update``, ``turn_detection``,
``Limits``), ``realtime_items.py`` (items, turn streams, ``Work``) and ``realtime_transcriber.py``
(``Transcriber``: the model side).

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
one stream with turn detection (``TurnStream``; the stream's ``turns``): each speech turn is
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

import time
from collections.abc import Iterable
from typing import Any

from susurrus.server.metrics import Metrics
from susurrus.server.realtime.items import (
    Item,
    ItemChain,
    TurnSignal,
    TurnStream,
    Work,
    turn_policy_for,
)
from susurrus.server.realtime.protocol import (
    BACKLOG_FULL,
    COMMIT_EMPTY,
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
from susurrus.server.realtime.settings import Limits, SessionSettings, apply_update, session_object


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
        self.first_audio_at: float | None = None  # time.monotonic() of the first audio accepted
        self.refusing = False  # appends are refused (the backlog is full) since the last error said so

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
                return self._append(event, event_id)
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

    def _append(self, event: dict[str, Any], event_id: str | None) -> tuple[list[dict[str, Any]], list[Work]]:
        pcm = decode_pcm16(event.get("audio"))
        if not len(pcm):
            return [], []
        seconds = len(pcm) / self.settings.rate
        if not self.has_room:
            # the backlog bound: this append is refused, said once per run of refused appends
            # (a client sending hours at once would otherwise get an error per append)
            if self.refusing:
                self.metrics.error("invalid_request_error", BACKLOG_FULL)
                return [], []
            self.refusing = True
            raise ProtocolError(BACKLOG_FULL, f"{self.pending_s:.0f} s of audio already await transcription (this "
                                              f"server holds at most {self.limits.max_buffered_s:g} s per session, "
                                              "--max-buffered-s): this append and the ones after it are refused "
                                              "until the transcription catches up; send audio at real-time pace, "
                                              "or wait for the transcripts before sending more",
                                event_id=event_id)
        self.refusing = False
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
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
        self.metrics.accepted(seconds)
        return [], [Work("append", target, pcm)]

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
            self.item.dropped = "cleared"  # queued appends for it are skipped by the worker
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

    def behind_s(self, now: float, slack_s: float = 2.0) -> float | None:
        """Seconds of accepted audio waiting for the model, for a client that sends at real-time
        pace; None for one that has sent more than ``slack_s`` ahead of the clock (a file sent at
        once: its backlog is its own doing, not the server's) or has sent nothing yet."""
        if self.first_audio_at is None or self.accepted_s > now - self.first_audio_at + slack_s:
            return None
        return self.pending_s

    @property
    def has_room(self) -> bool:
        """Whether the next append is accepted: less than ``max_buffered_s`` of accepted audio
        awaits the model. The server reads every message as it comes (so a client's keepalive
        pings are answered however far behind the model is) and holds the accepted audio in
        memory; past the bound appends are refused with ``input_audio_backlog_full``."""
        return self.pending_s < self.limits.max_buffered_s

    def done(self, work: Work) -> None:
        if work.kind == "append":
            self.pending_s = max(0.0, self.pending_s - work.audio_s)

    def finish(self) -> tuple[list[dict[str, Any]], list[Work]]:
        """The server ends the session (shutdown, ``--max-session-s``): the open item is
        committed (``committed`` now, ``completed`` from the worker) and the open turn ends
        where the accepted audio ends, so all accepted audio is transcribed; no error when
        nothing is open."""
        if self.item is not None and self.item.accepted_samples:
            return self.commit()
        if self.turns is not None:
            work = Work("end", self.turns)
            self.turns = None
            return [], [work]
        return [], []

    def close(self, pending: Iterable[Work], reason: str = "client_gone") -> None:
        """The connection ended: drop everything not yet transcribed (counted under ``reason``,
        or the reason its item was already dropped for)."""
        if self.item is not None:
            self.item.dropped = self.item.dropped or reason
        if self.turns is not None:
            self.turns.dropped = self.turns.dropped or reason
        for work in pending:
            work.item.dropped = work.item.dropped or reason
            self.metrics.dropped(work.audio_s, "failed" if getattr(work.item, "failed", False) else work.item.dropped)
