"""The serving commands: ``susurrus serve`` (the realtime and REST server on this machine),
``serve-ray`` (the same on a Ray Serve cluster), ``client`` (a realtime client), and the server
limits the first two share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from susurrus.transports.cli_args import float_range, int_range, origins_arg


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
    p.add_argument("--max-buffered-s", type=float_range(0.0, low_open=True), default=20.0,
                   help="audio per session accepted but not yet transcribed, in seconds; at this much the "
                        "server stops reading the connection until the model catches up, so TCP slows a fast "
                        "sender down (flow control: no audio is refused) (default: %(default)s)")
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
    from susurrus.transports.realtime_settings import Limits
    from susurrus.transports.rest import UploadLimits

    limits = Limits(max_message_bytes=args.max_message_kb * 1024, max_buffered_s=args.max_buffered_s,
                    max_sessions=max_sessions, max_outbound_bytes=args.max_outbound_kb * 1024,
                    idle_s=args.idle_timeout_s, max_session_s=args.max_session_s,
                    overload_lag_s=args.overload_lag_s)
    uploads = UploadLimits(max_bytes=round(args.max_upload_mb * 1024 * 1024), max_seconds=args.max_upload_s)
    return limits, uploads


def cmd_serve(args: argparse.Namespace) -> int:
    from susurrus.transports.listen import listen_socket

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
    import susurrus
    from susurrus.transports.server import serve

    # with worker processes the server's own copy only names the model (it is checked to load here,
    # once, before the workers load it again with --threads each, 1 by default)
    model = susurrus.load_model(args.model, threads=args.threads if args.workers == 0 else None,
                                int8_output=args.int8_output, compute_type=args.compute_type)
    limits, uploads = limits_of(args, args.max_sessions)
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


def cmd_serve_ray(args: argparse.Namespace) -> int:
    try:
        from susurrus.transports import ray_serve
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
        limits=limits, uploads=uploads,
        api_key=args.api_key, allowed_origins=args.allowed_origins, drain_s=args.drain_s,
        scale_down_grace_s=args.scale_down_grace_s)
    scale = ray_serve.ScaleOptions(sessions_per_replica=per_replica, target_sessions=args.target_sessions,
                                   min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                                   num_replicas=args.replicas, num_cpus=args.cpus_per_replica)
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0", "::") else args.host
    print(f"susurrus: deploying on Ray Serve; OpenAI Realtime transcription at ws://{shown}:{args.port}/v1/realtime , "
          f"REST at http://{shown}:{args.port}/v1/audio/ , demo at http://{shown}:{args.port}/ (Ctrl+C: remove it, "
          "each replica draining its sessions)", file=sys.stderr)
    ray_serve.run(replica, scale, address=args.address, host=args.host, port=args.port,
                  proxy_location=args.proxy_location)
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    from susurrus.transports.cli_args import UsageError, check_input_file
    from susurrus.transports.client import ClientError, check_url, main_client  # (no PyTorch)

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
