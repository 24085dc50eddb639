"""Scale-out on Ray Serve (``susurrus serve-ray``; the optional extra ``susurrus[ray]``).

One Serve deployment, :class:`SusurrusReplica`: each replica loads the model once and runs the
same app as ``susurrus serve`` (:func:`~susurrus.server.app.create_app`, its streams in
the replica's threads: one replica is one process, about one core) behind Serve's ingress, so
Serve's HTTP proxy carries the Realtime WebSocket (``/v1/realtime``), the REST API, ``/healthz``
and ``/metrics`` to the replicas. What Serve adds, and how it is set:

- **Routing and autoscaling on open sessions.** A WebSocket session is one Serve request for its
  whole life, so Serve's "ongoing requests" of a replica are its open sessions (plus the short
  REST calls). ``max_ongoing_requests`` is the replica's measured session capacity
  (``sessions_per_replica``, :data:`DEFAULT_SESSIONS_PER_REPLICA`, not Serve's default of 5), and
  so is the app's own ``max_sessions``: a replica never takes more sessions than it can
  transcribe in real time (one more than Serve allows was refused by the app, 1013, in the first
  cluster run). Each session goes to the replica with the fewest open requests
  (:class:`SessionRouter`): Serve's default router prefers replicas on the proxy's own node until
  they are full, which put all 8 sessions of the benchmark on one replica while the other idled.
  Autoscaling targets ``target_sessions`` open sessions per replica (70 % of capacity by default).
- **Health checks.** :meth:`SusurrusReplica.check_health` runs the engine: a short stream of a
  tone through the encoder and decoder on a thread of its own (not the sessions' pool, so a busy
  replica is not mistaken for a dead one), within :data:`HEALTH_PROBE_S`.
- **Graceful scale-down.** When Serve removes a replica (scale-down, redeploy), its proxy stops
  sending it new sessions and the replica waits for its ongoing requests, up to
  ``graceful_shutdown_timeout_s``, then is killed. Serve tells the user code nothing before that
  (``__del__`` runs only once no request is left, too late for hour-long WebSockets), so the
  replica watches its own state in the Serve controller (the public ``ReplicaDetails.state``,
  ``STOPPING``) while it has sessions open: its sessions go on normally for ``scale_down_grace_s``
  and then the app's drain (:func:`~susurrus.server.app.drain`) ends them as a server
  shutdown does: the open item committed and transcribed, ``completed``, close **1012**
  (``server_shutting_down``) within ``drain_s``, so clients reconnect and land on another
  replica. ``graceful_shutdown_timeout_s`` is set above ``scale_down_grace_s + drain_s`` so Serve
  never kills a replica that is still draining.

Every response of a replica carries ``x-susurrus-replica`` (its Serve replica id), the WebSocket
handshake's too, so a client (or the benchmark) knows where its session runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

try:
    from ray import serve
    from ray.serve.config import RequestRouterConfig
    from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("susurrus serve-ray needs Ray Serve: pip install 'susurrus[ray]'") from err

import numpy as np

from susurrus.server.realtime.settings import Limits
from susurrus.server.rest.jobs import UploadLimits

log = logging.getLogger("ray.serve")

DEPLOYMENT_NAME = "susurrus"
APP_NAME = "susurrus"
REPLICA_HEADER = "x-susurrus-replica"
# Real-time sessions one replica (one process, 1 torch thread, tiny.en) carries. Its streaming
# steps hold the GIL, so a replica has one core at most; benchmarks/ray_cluster.py measured each
# replica's CPU at 0.21-0.23 core-s per audio-s (plain serve 0.19) on the shared 2-core development
# machine: ``capacity`` (75 % of a core busy) gives 3. On the quiet machine (2026-12-02) it measured
# 0.11 (6); 3 stays the default, the conservative side. Set --sessions-per-replica from that
# benchmark for other models and machines.
DEFAULT_SESSIONS_PER_REPLICA = 3
HEALTH_PROBE_S = 20.0  # the engine probe must answer within this
STOPPING_POLL_S = 1.0  # how often a replica with open sessions asks the controller whether it is being removed
SHUTDOWN_MARGIN_S = 10.0  # graceful_shutdown_timeout_s beyond grace + drain: the poll, the close handshakes


@dataclass
class ReplicaOptions:
    """What each replica runs: the model and the server's limits (``susurrus serve``'s options)."""

    model: str = "tiny.en"
    threads: int = 1
    int8_output: bool = False
    compute_type: str = "auto"
    device: str = "auto"  # a replica with --gpus-per-replica sees its own GPU(s) (Ray sets CUDA_VISIBLE_DEVICES)
    limits: Limits = field(default_factory=Limits)
    uploads: UploadLimits = field(default_factory=UploadLimits)
    api_key: str | None = None
    allowed_origins: tuple[str, ...] | None = None
    drain_s: float = 30.0  # the app's drain: commit and finish open work, then close 1012
    scale_down_grace_s: float = 60.0  # a replica being removed lets its sessions run on this long first


@dataclass
class ScaleOptions:
    """How Serve places and scales the replicas."""

    sessions_per_replica: int = DEFAULT_SESSIONS_PER_REPLICA
    target_sessions: float | None = None  # per replica; None: 70 % of sessions_per_replica
    min_replicas: int = 1
    max_replicas: int = 1
    num_replicas: int | None = None  # fixed count (no autoscaling) when given
    initial_replicas: int | None = None  # autoscaling: replicas at deployment (None: min_replicas)
    num_cpus: float = 1.0  # Ray CPUs per replica
    num_gpus: float = 0.0  # Ray GPUs per replica (ray_actor_options num_gpus): each replica owns its card(s)
    upscale_delay_s: float = 10.0
    downscale_delay_s: float = 120.0


class _ReplicaHeader:
    """ASGI middleware: ``x-susurrus-replica`` on every HTTP response and WebSocket handshake."""

    def __init__(self, app: Any, replica: str):
        self.app, self.header = app, (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def tagged(message: dict) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, tagged if scope["type"] in ("http", "websocket") else send)


class SessionRouter(FIFOMixin, RequestRouter):
    """Serve's request router for sessions: the replica with the fewest open requests, on any
    node (join the shortest queue; two random replicas, as Serve's default, beyond
    :attr:`ALL_UP_TO` replicas). Serve's default router tries the replicas on the proxy's node
    first, which packs long sessions onto them while replicas on other nodes idle."""

    ALL_UP_TO = 16

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if len(candidate_replicas) > self.ALL_UP_TO:
            return [random.sample(candidate_replicas, 2)]
        return [list(candidate_replicas)]


def _probe_audio() -> np.ndarray:
    """1.5 s of a gliding tone: enough for the encoder and the decoder to run one step."""
    t = np.arange(24000, dtype=np.float32) / 16000
    return (0.1 * np.sin(2 * np.pi * (200 + 150 * t) * t)).astype(np.float32)


@serve.ingress()
class SusurrusReplica:
    """One replica: the model, loaded once, and ``susurrus serve``'s app around it (module docstring)."""

    def __init__(self, options: dict[str, Any]):
        import torch

        import susurrus
        from susurrus.server.app import create_app

        opts = ReplicaOptions(**{**options, "limits": Limits(**options["limits"]),
                                 "uploads": UploadLimits(**options["uploads"])})
        self.options = opts
        torch.set_num_threads(opts.threads)
        self.model = susurrus.load_model(opts.model, threads=opts.threads, int8_output=opts.int8_output,
                                         compute_type=opts.compute_type, device=opts.device)
        self.server_app = create_app(self.model, limits=opts.limits, api_key=opts.api_key, workers=0,
                                     threads=opts.threads, uploads=opts.uploads,
                                     allowed_origins=opts.allowed_origins, drain_s=opts.drain_s)
        self.state = self.server_app.state.susurrus
        self._probe = ThreadPoolExecutor(max_workers=1, thread_name_prefix="susurrus-health")
        self._probe_pcm = _probe_audio()
        try:
            context = serve.get_replica_context()
            self.replica_id = context.replica_tag
            self._ids = (context.app_name, context.deployment, context.replica_id.unique_id)
        except Exception:  # noqa: BLE001 - outside a replica (a test building the class by hand)
            self.replica_id, self._ids = f"local-{os.getpid()}", None
        self._stopping: asyncio.Task | None = None
        self._watch: asyncio.Task | None = None

    def __serve_build_asgi_app__(self) -> Any:
        """Called by Serve on the replica's event loop after ``__init__``: the app, and the watch
        for this replica's removal started on that loop."""
        self._watch = asyncio.get_running_loop().create_task(self._watch_stopping())
        return _ReplicaHeader(self.server_app, self.replica_id)

    # ------------------------------------------------------------------ health

    def _run_probe(self) -> str:
        stream = self.model.stream(vad=False)
        block = stream.config.chunk_ms * 16
        for i in range(0, len(self._probe_pcm), block):
            stream.feed(self._probe_pcm[i:i + block])
        stream.finish()
        return stream.text

    async def check_health(self) -> None:
        """Serve's health check: the engine runs a short stream, on its own thread, in time."""
        if self.state.pool._shutdown:  # noqa: SLF001 - the sessions' pool is gone: nothing can run
            raise RuntimeError("the session pool is shut down")
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self._probe, self._run_probe), HEALTH_PROBE_S)
        except asyncio.TimeoutError:
            raise RuntimeError(f"the engine did not run a 1.5 s probe stream within {HEALTH_PROBE_S:g} s") from None

    # ------------------------------------------------------------------ scale-down

    async def _my_state(self) -> str | None:
        """This replica's state in the Serve controller (``ReplicaDetails.state``), or None."""
        from ray.serve.context import _get_global_client

        app, deployment, unique = self._ids
        details = await asyncio.to_thread(_get_global_client().get_serve_details)
        replicas = (details.get("applications", {}).get(app, {}).get("deployments", {})
                    .get(deployment, {}).get("replicas", []))
        for replica in replicas:
            if replica.get("replica_id") == unique:
                state = replica.get("state")
                return str(getattr(state, "value", state))
        return None

    async def _watch_stopping(self) -> None:
        """While sessions are open, ask the controller each :data:`STOPPING_POLL_S` whether this
        replica is being removed; if so, :meth:`_scale_down`."""
        if self._ids is None:
            return
        m = self.state.metrics
        while True:
            await asyncio.sleep(STOPPING_POLL_S)
            if not (m.sessions_open or m.requests_open):
                continue  # nothing to save: Serve stops an idle replica at once
            try:
                state = await self._my_state()
            except Exception as err:  # noqa: BLE001 - the controller restarts, a transient error
                log.warning("susurrus: could not read this replica's state from the Serve controller: %s", err)
                continue
            if state == "STOPPING":
                await self._scale_down()
                return

    async def _scale_down(self) -> None:
        """This replica is being removed: let its sessions run on for ``scale_down_grace_s``
        (Serve sends it no new ones), then drain the app (close 1012 once each open item is
        transcribed, at most ``drain_s``)."""
        from susurrus.server.app import drain

        m, opts = self.state.metrics, self.options
        loop = asyncio.get_running_loop()
        log.info("susurrus: replica %s is being removed: %d session(s) open, %g s to finish before the drain",
                 self.replica_id, m.sessions_open, opts.scale_down_grace_s)
        until = loop.time() + opts.scale_down_grace_s
        while (m.sessions_open or m.requests_open) and loop.time() < until:
            await asyncio.sleep(0.2)
        await drain(self.state, opts.drain_s)

    async def drain_now(self) -> None:
        """Drain at once (the replica's ``__del__``; tests)."""
        from susurrus.server.app import drain

        if not self.state.shutdown.draining:
            await drain(self.state, self.options.drain_s)

    async def __del__(self) -> None:
        """Serve's last call (no request is left): stop the watch, then the app's lifespan."""
        if getattr(self, "_watch", None) is not None:
            self._watch.cancel()
        if getattr(self, "_probe", None) is not None:
            self._probe.shutdown(wait=False, cancel_futures=True)
        from ray.serve._private.http_util import ASGIAppReplicaWrapper

        await ASGIAppReplicaWrapper.__del__(self)


def shutdown_timeout_s(replica: ReplicaOptions) -> float:
    """Serve's ``graceful_shutdown_timeout_s``: the grace, the drain and a margin, so Serve never
    kills a replica that is still finishing its sessions."""
    return replica.scale_down_grace_s + replica.drain_s + SHUTDOWN_MARGIN_S


def deployment_options(replica: ReplicaOptions, scale: ScaleOptions) -> dict[str, Any]:
    """The Serve deployment's options (``Deployment.options``) for these settings."""
    if scale.sessions_per_replica < 1:
        raise ValueError("sessions_per_replica must be at least 1")
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": scale.sessions_per_replica,
        "request_router_config": RequestRouterConfig(request_router_class=SessionRouter),
        # a session queued behind full replicas would wait for another session to end (minutes,
        # hours): only a few wait (while a replica starts), the rest are refused
        "max_queued_requests": scale.sessions_per_replica,
        "graceful_shutdown_timeout_s": shutdown_timeout_s(replica),
        "graceful_shutdown_wait_loop_s": 1.0,
        "health_check_period_s": 10.0,
        "health_check_timeout_s": HEALTH_PROBE_S + 10.0,
        "ray_actor_options": {"num_cpus": scale.num_cpus,
                              "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(replica.threads)}}},
    }
    if scale.num_gpus:
        options["ray_actor_options"]["num_gpus"] = scale.num_gpus
    if scale.num_replicas is not None:
        options["num_replicas"] = scale.num_replicas
    else:
        target = scale.target_sessions or max(1.0, round(0.7 * scale.sessions_per_replica, 1))
        options["autoscaling_config"] = {
            "min_replicas": scale.min_replicas, "max_replicas": max(scale.min_replicas, scale.max_replicas),
            "target_ongoing_requests": target, "upscale_delay_s": scale.upscale_delay_s,
            "downscale_delay_s": scale.downscale_delay_s,
        }
        if scale.initial_replicas is not None:
            options["autoscaling_config"]["initial_replicas"] = scale.initial_replicas
    return options


def build_app(replica: ReplicaOptions | None = None, scale: ScaleOptions | None = None) -> Any:
    """The Serve application (``serve.run(build_app(...))``): replicas built from these options."""
    replica = replica or ReplicaOptions()
    scale = scale or ScaleOptions()
    replica.limits = Limits(**{**asdict(replica.limits), "max_sessions": scale.sessions_per_replica})
    as_dict = {**asdict(replica), "limits": asdict(replica.limits), "uploads": asdict(replica.uploads)}
    deployment = serve.deployment(SusurrusReplica).options(**deployment_options(replica, scale))
    return deployment.bind(as_dict)


def run(replica: ReplicaOptions, scale: ScaleOptions, *, address: str | None = None, host: str = "127.0.0.1",
        port: int = 8000, blocking: bool = True, proxy_location: str = "HeadOnly") -> None:
    """Connect to (or start) a Ray cluster, start Serve's HTTP proxy on ``host:port`` and deploy
    the app at ``/``; ``blocking``: wait until Ctrl+C or SIGTERM, then remove it (each replica
    drains its sessions)."""
    import signal

    import ray

    ray.init(address=address, namespace="susurrus", ignore_reinit_error=True, log_to_driver=False)
    serve.start(http_options={"host": host, "port": port, "location": proxy_location})
    serve.run(build_app(replica, scale), name=APP_NAME, route_prefix="/")
    if not blocking:
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    log.info("susurrus: removing the application; replicas drain their sessions (at most %.0f s)",
             shutdown_timeout_s(replica))
    with contextlib.suppress(Exception):
        serve.delete(APP_NAME)
    t0 = time.monotonic()
    while time.monotonic() - t0 < shutdown_timeout_s(replica) + 5:
        with contextlib.suppress(Exception):
            if APP_NAME not in serve.status().applications:
                break
        time.sleep(0.5)


def capacity(core_s_per_audio_s: float, cores: float = 1.0, headroom: float = 0.75) -> int:
    """Real-time sessions a replica of ``cores`` carries at a measured engine cost, keeping
    ``headroom`` of it busy at most (latency grows fast near saturation)."""
    if core_s_per_audio_s <= 0 or not math.isfinite(core_s_per_audio_s):
        raise ValueError("the cost per audio second must be a positive number")
    return max(1, int(cores * headroom / core_s_per_audio_s))
