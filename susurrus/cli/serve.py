"""The serving commands: ``susurrus serve`` (the realtime and REST server on this machine),
``serve-ray`` (the same on a Ray Serve cluster), ``client`` (a realtime client), and the server
limits the first two share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from susurrus.cli.args import float_range, int_range, origins_arg


def add_limit_args(p: argparse.ArgumentParser) -> None:
    """The server limits ``serve`` and ``serve-ray`` share (``susurrus serve --help``)."""
    p.add_argument("--api-key", default=None,
                   help="refuse connections without 'Authorization: Bearer KEY' or the WebSocket subprotocol "
                        "'openai-insecure-api-key.KEY' (browsers)")
    p.add_argument("--max-upload-mb", type=float_range(0.0, low_open=True), default=25.0,
                   help="largest REST upload in MiB (default: %(default)s, OpenAI's)")
    p.add_argument("--max-upload-s", type=float_range(0.0, low_open=True), default=600.0,
                   help="longest REST upload in seconds of audio (default: %(default)s)")
    p.add_argument("--max-message-kb", type=int_range(1), default=1024,
                   help="largest client message in KiB (default: %(default)s)")
    p.add_argument("--max-buffered-s", type=float_range(0.0, low_open=True), default=1800.0,
                   help="audio per session accepted but not yet transcribed, in seconds, held in memory (PCM16: "
                        "2.9 MB a minute at 24 kHz); the server reads every message at once, so a client's "
                        "keepalive pings are answered however far behind the model is; past this, appends are "
                        "refused (error input_audio_backlog_full); the default holds 30 minutes sent at once "
                        "(default: %(default)s)")
    p.add_argument("--overload-lag-s", type=float_range(0.0), default=1.5,
                   help="refuse new sessions (close code 1013, error server_overloaded; /healthz says overloaded, "
                        "/metrics susurrus_overloaded 1) while the median open session of a client sending at "
                        "real-time pace has more than this many seconds of audio waiting for the model, i.e. the "
                        "model is behind real time; open sessions go on; 0: never (default: %(default)s)")
    p.add_argument("--max-outbound-kb", type=int_range(0), default=1024,
                   help="server events queued for a client that does not read them, in KiB, beyond what its "
                        "socket holds; past it the session is closed (close code 1008, error client_too_slow) and "
                        "its memory freed; 0: no limit (default: %(default)s)")
    p.add_argument("--idle-timeout-s", type=float_range(0.0), default=300.0,
                   help="close a session after this many seconds without a client message while the model has "
                        "nothing of it to do (close code 1000, error idle_timeout); live clients send audio every "
                        "20-100 ms, even in silence; 0: never (default: %(default)s)")
    p.add_argument("--max-session-s", type=float_range(0.0), default=0.0,
                   help="end sessions this old: the open item is committed and transcribed, then close code 1000 "
                        "(error session_expired); 0: no limit (default: %(default)s)")
    p.add_argument("--allowed-origins", type=origins_arg, default=None, metavar="ORIGINS",
                   help="comma-separated web origins (https://app.example.com) whose pages may open WebSocket "
                        "sessions, besides the server's own (the demo), or '*' for any; clients without an Origin "
                        "header (not browsers: SDKs, susurrus client) are always allowed; others are refused with "
                        "HTTP 403 (default: same origin only)")


def limits_of(args: argparse.Namespace, max_sessions: int) -> tuple[Any, Any]:
    """The realtime :class:`Limits` and REST :class:`UploadLimits` the limit options set."""
    from susurrus.server.realtime.settings import Limits
    from susurrus.server.rest.api import UploadLimits

    limits = Limits(max_message_bytes=args.max_message_kb * 1024, max_buffered_s=args.max_buffered_s,
                    max_sessions=max_sessions, max_outbound_bytes=args.max_outbound_kb * 1024,
                    idle_s=args.idle_timeout_s, max_session_s=args.max_session_s,
                    overload_lag_s=args.overload_lag_s)
    uploads = UploadLimits(max_bytes=round(args.max_upload_mb * 1024 * 1024), max_seconds=args.max_upload_s)
    return limits, uploads


def cmd_serve(args: argparse.Namespace) -> int:
    from susurrus.server.listen import listen_socket

    try:
        sock = listen_socket(args.host, args.port)  # a busy port fails now, before anything is loaded or announced
    except OSError as err:
        print(f"susurrus serve: {err.strerror or err}", file=sys.stderr)
        return 2
    if (args.ssl_keyfile is None) != (args.ssl_certfile is None):
        print("susurrus serve: TLS needs both --ssl-keyfile and --ssl-certfile", file=sys.stderr)
        return 2
    for option, path in (("--ssl-keyfile", args.ssl_keyfile), ("--ssl-certfile", args.ssl_certfile)):
        if path is not None and not Path(path).is_file():
            print(f"susurrus serve: {option} {path}: no such file", file=sys.stderr)
            return 2
    from susurrus.server.app import serve

    # with worker processes the server's own copy only names the model (it is checked to load here,
    # once, before the workers load it again with --threads each, 1 by default)
    try:
        model, max_sessions = _serving_model(args)
    except ValueError as err:
        print(f"susurrus serve: {err}", file=sys.stderr)
        return 2
    limits, uploads = limits_of(args, max_sessions)
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0", "::") else args.host
    http, ws = ("https", "wss") if args.ssl_certfile else ("http", "ws")
    print(f"susurrus: demo at {http}://{shown}:{args.port}/ , OpenAI Realtime transcription at "
          f"{ws}://{shown}:{args.port}/v1/realtime , OpenAI audio REST API at {http}://{shown}:{args.port}/v1/audio/",
          file=sys.stderr)
    serve(model, args.host, args.port, limits=limits, api_key=args.api_key, workers=args.workers,
          threads=args.threads, log_level=args.log_level, sock=sock, uploads=uploads,
          allowed_origins=args.allowed_origins, drain_s=args.drain_s, ssl_keyfile=args.ssl_keyfile,
          ssl_certfile=args.ssl_certfile, batched=not args.no_batching, batch_window_ms=args.batch_window_ms,
          step_grid_ms=args.step_grid_ms, ws_compression=args.ws_compression)
    return 0


def _serving_model(args: argparse.Namespace) -> tuple[Any, int]:
    """The server's model and its session limit. On a GPU the worker (one: it owns the card and
    steps every session together) loads the model there; the server's own copy, which only
    names it, stays on the CPU; ``--max-sessions`` defaults to what the card's free memory holds
    (:func:`~susurrus.model.memory.cuda_max_sessions`)."""
    import susurrus
    from susurrus.api import resolve_compute_type, resolve_device

    device = resolve_device(args.device)
    if device.type == "cpu":
        model = susurrus.load_model(args.model, threads=args.threads if args.workers == 0 else None,
                                    int8_output=args.int8_output, compute_type=args.compute_type, device="cpu")
        return model, args.max_sessions or 16
    if args.workers is not None and args.workers > 1:
        raise ValueError(f"--device {args.device}: one worker process owns the card (--workers 1, the default there, "
                         "or 0: in the server process), not {args.workers}")
    compute_type = resolve_compute_type(args.compute_type, device)
    if args.workers == 0:
        model = susurrus.load_model(args.model, threads=args.threads, int8_output=args.int8_output,
                                    compute_type=compute_type, device=str(device))
    else:
        model = susurrus.load_model(args.model, compute_type="float32", device="cpu")
        model.compute_type, model.device = compute_type, str(device)  # what the worker loads
    if args.max_sessions:
        return model, args.max_sessions
    import torch

    from susurrus.api import HALF
    from susurrus.model.memory import cuda_max_sessions

    n, how = cuda_max_sessions(model.net.dims, HALF.get(compute_type, torch.float32), device)
    print(f"susurrus serve: --max-sessions {how}", file=sys.stderr)
    return model, n


def cmd_serve_ray(args: argparse.Namespace) -> int:
    try:
        from susurrus.server import ray_serve
    except ImportError as err:
        print(f"susurrus serve-ray: {err}", file=sys.stderr)
        return 2

    per_replica = args.sessions_per_replica or ray_serve.DEFAULT_SESSIONS_PER_REPLICA
    if args.replicas is None and args.max_replicas < args.min_replicas:
        print("susurrus serve-ray: --max-replicas is below --min-replicas", file=sys.stderr)
        return 2
    limits, uploads = limits_of(args, per_replica)
    replica = ray_serve.ReplicaOptions(
        model=args.model, threads=args.threads, int8_output=args.int8_output, compute_type=args.compute_type,
        device=args.device, limits=limits, uploads=uploads,
        api_key=args.api_key, allowed_origins=args.allowed_origins, drain_s=args.drain_s,
        scale_down_grace_s=args.scale_down_grace_s)
    scale = ray_serve.ScaleOptions(sessions_per_replica=per_replica, target_sessions=args.target_sessions,
                                   min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                                   num_replicas=args.replicas, num_cpus=args.cpus_per_replica,
                                   num_gpus=args.gpus_per_replica)
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0", "::") else args.host
    print(f"susurrus: deploying on Ray Serve; OpenAI Realtime transcription at ws://{shown}:{args.port}/v1/realtime , "
          f"REST at http://{shown}:{args.port}/v1/audio/ , demo at http://{shown}:{args.port}/ (Ctrl+C: remove it, "
          "each replica draining its sessions)", file=sys.stderr)
    ray_serve.run(replica, scale, address=args.address, host=args.host, port=args.port,
                  proxy_location=args.proxy_location)
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    from susurrus.cli.args import UsageError, check_input_file
    from susurrus.client import ClientError, check_url, main_client  # (no PyTorch)

    if (args.input is None) == (not args.mic):
        raise UsageError("give an audio FILE or --mic (one of them)")
    try:
        check_url(args.url)
    except ClientError as err:
        raise UsageError(str(err)) from None
    if args.input is not None:
        check_input_file(args.input)

    return main_client(args.url, args.input, mic=args.mic, realtime=args.realtime, rate=args.rate,
                       block_ms=args.block_ms, latency=args.latency, language=args.language,
                       api_key=args.api_key, turns=args.turns)
