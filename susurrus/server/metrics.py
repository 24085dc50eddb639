"""Server counters (WebSocket sessions and REST requests), rendered as Prometheus text at ``/metrics``."""

from __future__ import annotations

import threading
from collections.abc import Iterable

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# why accepted audio was never run through the model (``susurrus_audio_dropped_seconds_total{reason}``)
DROP_REASONS = {
    "cleared": "the client cleared it (input_audio_buffer.clear) before the model reached it",
    "client_gone": "the client disconnected (or left a REST request) before the model reached it",
    "backpressure": "the session was closed because its client stopped reading events",
    "drain_deadline": "the server shut down and the drain deadline (--drain-s) passed first",
    "session_expired": "the session reached --max-session-s and the drain deadline passed first",
    "failed": "the model failed on its item (a worker died)",
}


class Metrics:
    """Server counters, exposed in the Prometheus text format by :meth:`render`. Thread-safe.

    Audio, compute, words and errors count both transports; ``sessions_*`` are WebSocket
    sessions, ``requests_*`` REST requests (``/v1/audio/*``, ``/v1/models``).

    Every accepted second of audio (``accepted``: an append the session took, a decoded upload)
    ends in exactly one place, in seconds of the client's audio: run through the model
    (``processed``: ``audio_seconds``) or dropped with a reason (``dropped``; :data:`DROP_REASONS`),
    so once nothing is queued ``accepted = transcribed + sum(dropped)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions_open = 0
        self.sessions_total = 0
        self.sessions_refused: dict[str, int] = {}
        self.audio_accepted_seconds = 0.0
        self.audio_seconds = 0.0
        self.audio_dropped: dict[str, float] = {}  # reason -> seconds
        self.compute_seconds = 0.0
        self.steps = 0  # engine steps of the streams (WebSocket items and turns, streamed REST jobs)
        self.items_completed = 0
        self.words = 0
        self.latency_buckets = [0] * len(LATENCY_BUCKETS)
        self.latency_sum = 0.0
        self.errors: dict[tuple[str, str], int] = {}
        self.workers = 0  # model worker processes (0: the server's own threads)
        self.worker_restarts = 0
        self.requests_open = 0  # REST transcriptions running now (they share ``max_sessions`` with sessions)
        self.requests: dict[tuple[str, int], int] = {}  # (endpoint, HTTP status) -> count

    def request(self, endpoint: str, status: int) -> None:
        with self.lock:
            self.requests[(endpoint, status)] = self.requests.get((endpoint, status), 0) + 1

    def error(self, type: str, code: str) -> None:
        with self.lock:
            self.errors[(type, code)] = self.errors.get((type, code), 0) + 1

    def refused(self, reason: str) -> None:
        with self.lock:
            self.sessions_refused[reason] = self.sessions_refused.get(reason, 0) + 1

    def processed(self, audio_s: float, compute_s: float, word_latencies: Iterable[float], steps: int = 0) -> None:
        with self.lock:
            self.audio_seconds += audio_s
            self.compute_seconds += compute_s
            self.steps += steps
            for lat in word_latencies:
                self.words += 1
                self.latency_sum += lat
                for i, bound in enumerate(LATENCY_BUCKETS):
                    if lat <= bound:
                        self.latency_buckets[i] += 1

    def accepted(self, audio_s: float) -> None:
        with self.lock:
            self.audio_accepted_seconds += audio_s

    def dropped(self, audio_s: float, reason: str) -> None:
        if reason not in DROP_REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        if audio_s <= 0:
            return
        with self.lock:
            self.audio_dropped[reason] = self.audio_dropped.get(reason, 0.0) + audio_s

    @property
    def audio_dropped_seconds(self) -> float:
        with self.lock:
            return sum(self.audio_dropped.values())

    def render(self) -> str:
        with self.lock:
            out = [
                "# HELP susurrus_sessions_open Realtime sessions open now.",
                "# TYPE susurrus_sessions_open gauge",
                f"susurrus_sessions_open {self.sessions_open}",
                "# HELP susurrus_sessions_total Realtime sessions accepted since start.",
                "# TYPE susurrus_sessions_total counter",
                f"susurrus_sessions_total {self.sessions_total}",
                "# HELP susurrus_sessions_refused_total Connections refused, by reason.",
                "# TYPE susurrus_sessions_refused_total counter",
                *(f'susurrus_sessions_refused_total{{reason="{r}"}} {n}'
                  for r, n in sorted(self.sessions_refused.items())),
                "# HELP susurrus_audio_accepted_seconds_total Seconds of audio accepted (realtime appends, "
                "decoded uploads); each ends transcribed or dropped.",
                "# TYPE susurrus_audio_accepted_seconds_total counter",
                f"susurrus_audio_accepted_seconds_total {self.audio_accepted_seconds:.3f}",
                "# HELP susurrus_audio_seconds_total Seconds of accepted audio transcribed (run through the model).",
                "# TYPE susurrus_audio_seconds_total counter",
                f"susurrus_audio_seconds_total {self.audio_seconds:.3f}",
                "# HELP susurrus_audio_dropped_seconds_total Seconds of accepted audio never run through the model, "
                "by reason.",
                "# TYPE susurrus_audio_dropped_seconds_total counter",
                *(f'susurrus_audio_dropped_seconds_total{{reason="{r}"}} {self.audio_dropped.get(r, 0.0):.3f}'
                  for r in DROP_REASONS),
                "# HELP susurrus_compute_seconds_total Wall seconds the model worked (all sessions).",
                "# TYPE susurrus_compute_seconds_total counter",
                f"susurrus_compute_seconds_total {self.compute_seconds:.3f}",
                "# HELP susurrus_steps_total Streaming engine steps run (each encodes and decodes a chunk of new "
                "audio; idle audio runs none): compute per step is the rate of susurrus_compute_seconds_total over "
                "this one, while no offline upload runs.",
                "# TYPE susurrus_steps_total counter",
                f"susurrus_steps_total {self.steps}",
                "# HELP susurrus_workers Model worker processes (0: streams run in the server process).",
                "# TYPE susurrus_workers gauge",
                f"susurrus_workers {self.workers}",
                "# HELP susurrus_worker_restarts_total Model worker processes that died and were restarted.",
                "# TYPE susurrus_worker_restarts_total counter",
                f"susurrus_worker_restarts_total {self.worker_restarts}",
                "# HELP susurrus_items_completed_total Items transcribed to completion.",
                "# TYPE susurrus_items_completed_total counter",
                f"susurrus_items_completed_total {self.items_completed}",
                "# HELP susurrus_word_latency_seconds Audio fed after a word's end before it was committed.",
                "# TYPE susurrus_word_latency_seconds histogram",
            ]
            for bound, n in zip(LATENCY_BUCKETS, self.latency_buckets):
                out.append(f'susurrus_word_latency_seconds_bucket{{le="{bound}"}} {n}')
            out += [f'susurrus_word_latency_seconds_bucket{{le="+Inf"}} {self.words}',
                    f"susurrus_word_latency_seconds_sum {self.latency_sum:.3f}",
                    f"susurrus_word_latency_seconds_count {self.words}",
                    "# HELP susurrus_http_requests_open REST transcriptions and translations running now.",
                    "# TYPE susurrus_http_requests_open gauge",
                    f"susurrus_http_requests_open {self.requests_open}",
                    "# HELP susurrus_http_requests_total REST requests answered, by endpoint and HTTP status.",
                    "# TYPE susurrus_http_requests_total counter"]
            out += [f'susurrus_http_requests_total{{endpoint="{e}",status="{c}"}} {n}'
                    for (e, c), n in sorted(self.requests.items())]
            out += ["# HELP susurrus_errors_total Errors sent (events and REST error bodies), by type and code.",
                    "# TYPE susurrus_errors_total counter"]
            out += [f'susurrus_errors_total{{type="{t}",code="{c}"}} {n}' for (t, c), n in sorted(self.errors.items())]
        return "\n".join(out) + "\n"

