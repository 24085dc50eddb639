"""Command line: ``susurrus transcribe``, ``stream``, ``bench``, ``serve``, ``serve-ray`` and ``client``.

Heavy modules (PyTorch, the model, the server) are imported inside the commands, so ``--help``
and argument errors come at once; arguments are checked before any work (``cli_args``). The
commands ``stream`` (``cli_stream``) and ``serve``, ``serve-ray``, ``client`` (``cli_serve``) live
in their own modules, and so does ``transcribe`` (``transcribe``); this one has the parser and ``bench``.
"""

from __future__ import annotations

import argparse
import sys

from susurrus.cli.args import (
    UsageError,
    check_device,
    device_arg,
    float_range,
    int_range,
    language_arg,
    ms_list,
)
from susurrus.cli.serve import add_limit_args, cmd_client, cmd_serve, cmd_serve_ray
from susurrus.cli.speakers import add_encoder_arg, add_speaker_args
from susurrus.cli.transcribe import cmd_transcribe
from susurrus.writers import WRITERS

THREADS_HELP = ("torch threads (default: %(default)s: one thread was 2-5x faster than all cores on a "
                "2-core machine shared with other work, with or without one more busy core "
                "(docs/benchmarks.md); try more on an idle many-core machine)")

MODEL_HELP = ("model: an embedded name (tiny.en, base), a CTranslate2 directory, a Hugging Face "
              "checkpoint directory or cached repo id (openai/whisper-small), or an OpenAI .pt file, "
              "any size up to large-v3 and large-v3-turbo; nothing is downloaded (default: %(default)s)")


# susurrus.api.COMPUTE_TYPES (not imported here: torch)
COMPUTE_TYPES = ["float32", "int8", "int8_encoder", "int8_decoder", "bf16_encoder", "float16", "bfloat16"]
AUTO = "auto"  # susurrus.api.AUTO
COMPUTE_TYPE_HELP = ("auto (default): bfloat16 on a GPU; on a CPU bf16_encoder where it has bfloat16 instructions "
                     "(AVX512-BF16, AMX), float32 elsewhere. float32: exact, every product as the checkpoint's. "
                     "bf16_encoder: the encoder's "
                     "linear layers and attention in bfloat16 (tiny.en: the same text as float32 on all 49 English "
                     "dev items streaming, base: on 48, for 10-18%% less CPU; on a CPU without bf16 instructions "
                     "emulated and slower). "
                     "int8: the linear layers of the encoder's and the decoder's blocks on int8 weights; "
                     "int8_encoder and int8_decoder quantise one side only. Lossy: only int8_encoder on tiny.en "
                     "stayed within 0.2 WER points on the dev set; int8 cost base 3.3 points streaming "
                     "(docs/benchmarks.md); the int8 types and bf16_encoder are the CPU's (refused on a GPU). "
                     "bfloat16, float16: the whole model (weights, caches, products) in that dtype, layer norms, "
                     "softmaxes and logits in float32; the GPU's types (bfloat16 keeps float32's range with 8 "
                     "bits of mantissa, float16 has 11 bits and a narrower range); their WER on a GPU is not "
                     "measured yet; on a CPU they run slowly")
DEVICE_HELP = ("where the model runs: auto (default: a CUDA GPU when torch sees one, else the CPU), cpu, cuda or "
               "cuda:N; asking for cuda where torch sees none is an error")


def _add_compute_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compute-type", choices=[AUTO, *COMPUTE_TYPES], default=AUTO, help=COMPUTE_TYPE_HELP)
    p.add_argument("--device", type=device_arg, default=AUTO, help=DEVICE_HELP)
    p.add_argument("--int8-output", action="store_true",
                   help="int8 weights for the vocabulary projection (faster, near-ties may flip)")


def _add_model_args(p: argparse.ArgumentParser, threads_help: str = THREADS_HELP) -> None:
    p.add_argument("--model", default="tiny.en", help=MODEL_HELP)
    p.add_argument("--threads", type=int_range(1), default=1, help=threads_help)
    _add_compute_args(p)




def _cmd_stream(args: argparse.Namespace) -> int:
    from susurrus.cli.stream import cmd_stream

    return cmd_stream(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.diarize:  # speaker labels on conversations assembled from the data root (speakers/bench.py)
        from susurrus.speakers.bench import cli_main

        return cli_main(args)
    try:
        from susurrus.evaluation.data import read_items

        items = read_items(args.inputs)
    except (FileNotFoundError, ValueError, KeyError) as e:  # a missing path, a broken manifest line
        raise UsageError(str(e)) from None
    from susurrus.cli.args import check_input_file

    for item in items:  # every audio file there and audio, before PyTorch and the model
        check_input_file(str(item.audio))
    import torch

    import susurrus
    from susurrus.evaluation import bench
    from susurrus.streaming.session import stream_config

    torch.set_num_threads(args.threads or 1)
    model = susurrus.load_model(args.model, int8_output=args.int8_output, compute_type=args.compute_type,
                                device=args.device)
    default_language = "en" if not model.is_multilingual else args.language
    for item in items:  # unlabelled audio: the language asked for (or English for English-only models)
        item.language = item.language or default_language or "en"
    wanted = args.language or (None if model.is_multilingual else "en")  # English-only: English items
    items = [i for i in items if wanted is None or i.language == wanted]
    if args.exclude_approximate:
        items = [i for i in items if not i.approximate]
    items = items[: args.limit] if args.limit else items
    if not items:
        raise UsageError(f"no {args.language or ''} items in {' '.join(args.inputs)}")
    if not model.is_multilingual and any(i.language != "en" for i in items):
        raise UsageError(f"{args.model} is English-only; pass --language en or a multilingual model")
    presets = ["low", "medium", "high"] if args.sweep else (args.presets or "").split(",") if args.presets else [None]
    try:
        configs = [stream_config(p or args.latency, chunk_ms=args.chunk_ms, lookahead_ms=args.lookahead_ms,
                                 silence_context_ms=args.silence_context_ms,
                                 commit_margin_ms=args.commit_margin_ms, policy=args.policy,
                                 first_commit_ms=args.first_commit_ms, step_phase_ms=phase)
                   for p in presets for phase in args.phases]
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        results = bench.run(model, items, configs, progress=sys.stderr.isatty(), together=args.streams,
                            detect_language=args.detect_language, offline_cache=args.offline_cache,
                            offline_spread=args.offline_spread)
    except bench.AudioError as err:
        raise UsageError(str(err)) from None
    audio = results[0].audio_s
    langs = ",".join(sorted({i.language for i in items}))
    print(f"\n{args.model}, {len(items)} items ({langs}), {audio:.1f} s of audio, "
          f"{torch.get_num_threads()} thread(s); one padded 30 s encode: {results[0].full_encode_s * 1000:.0f} ms; "
          f"offline: greedy with temperature fallback; language "
          f"{'detected' if args.detect_language and model.is_multilingual else 'given'}\n")
    print(bench.report(results, worst=args.worst))
    if args.json:
        bench.write_json(results, args.json)
        print(f"\nwrote {args.json}", file=sys.stderr)
    if args.plot:
        bench.plot(results, args.plot)
        print(f"\nwrote {args.plot}", file=sys.stderr)
    return 0


def _add_stream_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latency", choices=["low", "medium", "high"], default="medium",
                   help="preset trading latency for accuracy (default: %(default)s); the explicit "
                        "settings below override it")
    p.add_argument("--chunk-ms", type=int_range(20, 5000, " ms"), default=None,
                   help="audio per step, 20..5000 ms (medium: 640)")
    p.add_argument("--lookahead-ms", type=int_range(0, 5000, " ms"), default=None,
                   help="encoder look-ahead: trailing audio (ms) re-encoded in both directions at every step, 0..5000 "
                        "(medium and low: 1000 for English, 1500 for other languages; high: 1500)")
    p.add_argument("--silence-context-ms", type=int_range(0, 5000, " ms"), default=None,
                   help="silence after the audio encoded at every step as its continuation (Whisper's "
                        "end-of-audio context), 0..5000 (medium: 500)")
    p.add_argument("--commit-margin-ms", type=int_range(0, 30000, " ms"), default=None,
                   help="commit words the model reads at least this far (ms) before the audio edge (medium: 500)")
    p.add_argument("--policy", choices=["alignatt", "agreement"], default=None,
                   help="commit policy: alignment-guided (default) or agreement of two steps")
    p.add_argument("--first-commit-ms", type=int_range(0, 30000, " ms"), default=None,
                   help="commit nothing until the stream holds this much audio (the opening words "
                        "need right context; medium: 1500)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="susurrus",
        description="Live speech-to-text with Whisper. Every command runs offline on local weights.")
    from susurrus import __version__

    parser.add_argument("--version", action="version", version=f"susurrus {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("transcribe", help="transcribe audio files (WAV, FLAC, OGG, MP3, ...)",
                       description="Transcribe whole files in 30 s windows, printing segments as "
                                   "they are decoded and writing txt/srt/vtt/json files.")
    t.add_argument("files", nargs="+", metavar="FILE", help="audio files to transcribe")
    _add_model_args(t)
    t.add_argument("--language", type=language_arg, default=None,
                   help="language code or name (en, de, German, ...); default: detect (multilingual models; "
                        "English-only models refuse other languages)")
    t.add_argument("--task", choices=["transcribe", "translate"], default="transcribe",
                   help="translate: English text from any language (multilingual models)")
    t.add_argument("--beam-size", type=int_range(1, 100), default=5, help="beams; 1 = greedy (default: 5)")
    t.add_argument("--temperature", type=float_range(0.0), default=None,
                   help="a single decoding temperature, disabling the fallback ladder "
                        "0.0,0.2,...,1.0 used by default")
    t.add_argument("--word-timestamps", action="store_true",
                   help="word start/end times from cross-attention alignment (json, and srt/vtt "
                        "segment bounds)")
    t.add_argument("--without-timestamps", action="store_true",
                   help="decode without timestamp tokens (text only; windows advance by 30 s)")
    t.add_argument("--initial-prompt", "--prompt", default=None,
                   help="text to condition the first window on: names, terms, spelling, style")
    t.add_argument("--no-condition-on-previous-text", action="store_true",
                   help="do not feed each window's text to the next as a prompt")
    t.add_argument("--no-vad", action="store_true",
                   help="transcribe every 30 s window, as Whisper does; by default only the speech the voice "
                        "activity detector (Silero, as in 'stream') finds is, so silence and noise give no text")
    t.add_argument("--output-format", "-f", choices=[*sorted(WRITERS), "all"], default="txt",
                   help="file format to write (default: %(default)s)")
    t.add_argument("--output-dir", "-o", default=".",
                   help="folder to write into, made if missing (default: current dir)")
    t.add_argument("--quiet", action="store_true", help="print no segments or progress")
    t.add_argument("--progress", action="store_true", help="show the progress bar even when "
                                                           "stderr is not a terminal")
    add_speaker_args(t)
    t.set_defaults(func=cmd_transcribe)

    s = sub.add_parser("stream", help="transcribe live: audio streams in, text streams out",
                       description="Stream a file (or raw PCM on stdin with '-') through the "
                                   "incremental engine. Committed text is printed plain, the "
                                   "interim guess dimmed; committed text never changes.")
    s.add_argument("input", metavar="FILE|-", help="an audio file, or - for raw PCM on stdin (Ctrl+C ends it: "
                                                  "the pending words are committed and the outputs written)")
    _add_model_args(s)
    _add_stream_args(s)
    s.add_argument("--prompt", default=None,
                   help="text to condition the decoder on in every window (names, terms, spelling), "
                        "as Whisper's initial prompt offline")
    s.add_argument("--language", type=language_arg, default=None,
                   help="language code or name (multilingual models; default: detect; English-only models "
                        "refuse other languages)")
    s.add_argument("--task", choices=["transcribe", "translate"], default=None,
                   help="translate: stream an English translation (multilingual models)")
    s.add_argument("--turns", action="store_true",
                   help="detect speech turns (OpenAI server_vad semantics) and print one line per turn")
    s.add_argument("--semantic-turns", action="store_true",
                   help="like --turns, reading the text 192 ms into each pause: a sentence end the "
                        "decoder is sure of ends the turn after 0.7x the silence, a trailing 'and', "
                        "'the' or 'um' waits 2x")
    s.add_argument("--silence-ms", type=int_range(32, 10000, " ms (one 32 ms voice activity frame at least)"),
                   default=500, help="silence that ends a turn, 32..10000 ms (default: %(default)s)")
    s.add_argument("--no-vad", action="store_true",
                   help="no voice activity detection: decode every chunk, silence included")
    s.add_argument("--pcm-format", choices=["s16le", "f32le"], default="s16le",
                   help="stdin sample format (default: %(default)s)")
    s.add_argument("--rate", type=int_range(1000, 384000, " Hz"), default=16000,
                   help="stdin sample rate in Hz (default: %(default)s; resampled to 16 kHz)")
    s.add_argument("--channels", type=int_range(1, 32), default=1,
                   help="stdin channels, interleaved (default: %(default)s; mixed down to mono)")
    s.add_argument("--realtime", action="store_true",
                   help="pace the input at speaking speed (default: as fast as possible)")
    s.add_argument("--output-format", "-f", choices=[*sorted(WRITERS)], default=None,
                   help="also write the result (json carries every word's start, end, emitted_at)")
    s.add_argument("--output-dir", "-o", default=".",
                   help="folder to write into, made if missing (default: current dir)")
    s.add_argument("--quiet", action="store_true", help="no live display")
    add_speaker_args(s)
    s.set_defaults(func=_cmd_stream)

    b = sub.add_parser("bench", help="measure streaming accuracy, latency, cost and health on speech",
                       description="Stream every item (a manifest: JSON lines with id, audio, text, language; "
                                   "or plain audio files without references) in simulated real time and print "
                                   "WER beside the same model offline (greedy with temperature fallback), the "
                                   "stream's agreement with the offline text (no reference needed), per-word "
                                   "latency, CPU cost and memory, loops, stalls and speech lost to the voice "
                                   "activity gate; per condition and for the worst items.")
    b.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="manifest.jsonl, a folder holding one, or audio files / folders of them (unlabelled)")
    b.add_argument("--model", default="tiny.en", help=MODEL_HELP)
    b.add_argument("--threads", type=int, default=1, help="CPU threads (default: %(default)s)")
    _add_compute_args(b)
    _add_stream_args(b)
    b.add_argument("--language", default=None,
                   help="only items of this language (default: all; English-only models take English items)")
    b.add_argument("--detect-language", action="store_true",
                   help="multilingual models: detect the language instead of giving the item's (offline and streaming)")
    b.add_argument("--exclude-approximate", action="store_true",
                   help="leave out items whose reference text is marked approximate")
    b.add_argument("--limit", type=int, default=None, help="first N items only")
    b.add_argument("--streams", type=int_range(1), default=1, metavar="N",
                   help="stream N items at once, stepped together as a server's worker steps its sessions (the "
                        "cost column is then each item's share of the group's CPU) (default: %(default)s)")
    b.add_argument("--sweep", action="store_true", help="run the low, medium and high presets")
    b.add_argument("--presets", default=None, metavar="LIST",
                   help="run these presets, comma-separated (e.g. medium,high)")
    b.add_argument("--phases", type=ms_list, default=[0], metavar="LIST",
                   help="run each setting with its steps at these phases, comma-separated ms (e.g. 0,160,320,480: "
                        "the first step that much shorter); where steps fall is arbitrary and moves the text, so "
                        "a decision should hold over phases: a table gives the WER per phase and the items more "
                        "than 15 points worse than offline at every phase and at some phase (default: 0)")
    b.add_argument("--offline-cache", default=None, metavar="FILE",
                   help="keep the offline transcriptions in this JSON file between runs")
    b.add_argument("--offline-spread", action="store_true",
                   help="also transcribe every item offline with 10 ms (one mel frame) of digital silence before "
                        "it, and count the items that alone puts more than 15 points from offline, beside the "
                        "stream's count: the noise floor of comparing items with offline")
    b.add_argument("--worst", type=int, default=10,
                   help="list this many worst items per setting (default: %(default)s)")
    b.add_argument("--json", default=None, help="write every item's texts and figures here (JSON)")
    b.add_argument("--plot", default=None, help="write a WER-versus-latency plot (PNG) here")
    b.add_argument("--diarize", action="store_true",
                   help="speaker labels instead: DER and WDER (pyannote.metrics) on 2-4 speaker conversations "
                        "assembled from INPUT (the shared data root; cached in ~/.cache/susurrus/diarization)")
    b.add_argument("--diarize-asr", type=int, default=2, metavar="N",
                   help="with --diarize: also stream the first N conversations of each set through the model "
                        "(real words: WDER, text identity) (default: %(default)s)")
    add_encoder_arg(b)
    b.set_defaults(func=_cmd_bench)

    v = sub.add_parser("serve", help="server: OpenAI Realtime transcription over WebSocket, OpenAI's audio REST "
                                     "API, browser demo",
                       description="Serve the streaming engine over the OpenAI Realtime transcription protocol "
                                   "(WebSocket /v1/realtime) and OpenAI's audio REST API (POST "
                                   "/v1/audio/transcriptions and /v1/audio/translations, GET /v1/models), with a "
                                   "browser demo at /, /healthz and /metrics (Prometheus). The streams and "
                                   "transcriptions run in worker processes (--workers), each loading the model once.")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    v.add_argument("--port", type=int_range(0, 65535), default=8000, help="port (default: %(default)s)")
    _add_model_args(v, "torch threads in each worker process (with --workers 0: in the server process, shared by "
                       "its streams) (default: %(default)s)")
    add_limit_args(v)
    v.add_argument("--workers", type=int_range(0, 256), default=None,
                   help="worker processes that run the streams, each loading the model (with --threads torch "
                        "threads) and each stream pinned to the least-loaded one; 0: run them in the "
                        "server process's threads, on one model (about one core in all: the streaming steps hold "
                        "the GIL) (default: the number of CPU cores; with --device cuda 1: one process owns the "
                        "card and steps every session together)")
    v.add_argument("--no-batching", action="store_true",
                   help="step each worker's streams one at a time instead of together (their encoder and decoder "
                        "passes packed into one per round: the same text, less CPU per stream; for comparison)")
    v.add_argument("--batch-window-ms", type=float_range(0.0, 1000.0), default=0.0,
                   help="when a stream's step finds its worker idle, wait this many ms for others to join the "
                        "round (bigger batches, more latency); 0: step at once, the others join the next round "
                        "(default: %(default)s; docs/benchmarks.md compares)")
    v.add_argument("--step-grid-ms", type=float_range(0.0, 1000.0), default=0.0,
                   help="hold each stream's due step until the next multiple of this many ms on its worker's "
                        "clock, so that sessions that started at different times step in the same packed rounds "
                        "(less CPU per stream, up to this much more latency; same text); 0: step at once "
                        "(default: %(default)s; docs/benchmarks.md measures it)")
    v.add_argument("--max-sessions", type=int_range(1), default=None,
                   help="concurrent WebSocket sessions and REST transcriptions together; more are refused "
                        "(default: 16 on a CPU; on a GPU as many as its free memory holds, less the model and a "
                        "15%% margin, at a stream's peak cache: docs/architecture.md)")
    v.add_argument("--drain-s", type=float_range(0.0), default=30.0,
                   help="on SIGTERM or Ctrl+C: refuse new sessions and uploads (close code 1012 / HTTP 503, "
                        "/healthz 503), commit each session's open item and let open work finish for at most this "
                        "many seconds, then close what is left (close code 1012 after an error saying what was not "
                        "transcribed); a second Ctrl+C cuts it short (default: %(default)s)")
    v.add_argument("--ssl-keyfile", default=None, metavar="FILE",
                   help="TLS private key (PEM): serve https:// and wss:// (with --ssl-certfile)")
    v.add_argument("--ssl-certfile", default=None, metavar="FILE",
                   help="TLS certificate chain (PEM), with --ssl-keyfile")
    v.add_argument("--ws-compression", action="store_true",
                   help="accept WebSocket per-message compression (permessage-deflate) from clients that offer it: "
                        "less bandwidth for the JSON events, more CPU per message on both sides; off by default, as "
                        "the audio (base64 PCM) barely compresses")
    v.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="how much the server logs (uvicorn's levels; info: one line per connection) "
                        "(default: %(default)s)")
    v.set_defaults(func=cmd_serve)

    r = sub.add_parser("serve-ray", help="the server scaled out on a Ray cluster (Ray Serve; needs susurrus[ray])",
                       description="Serve the same endpoints as 'susurrus serve' (WebSocket /v1/realtime, the REST "
                                   "API, /healthz, /metrics, the demo) from replicas on a Ray cluster, through Ray "
                                   "Serve's HTTP proxy: each replica is one process that loads the model once and "
                                   "runs the streams of --sessions-per-replica sessions at most. Serve routes each "
                                   "session to a replica, autoscales on open sessions (--min-replicas, "
                                   "--max-replicas, --target-sessions) and health-checks the engine; a replica "
                                   "being removed takes no new sessions, lets its open ones run for "
                                   "--scale-down-grace-s, then commits and finishes each one's open item and closes "
                                   "it (close code 1012, server_shutting_down) within --drain-s. On one machine it "
                                   "starts a local Ray; on a cluster ('ray start --head' on one node, 'ray start "
                                   "--address=HEAD:6379' on the others) run it with --address auto on a node of it. "
                                   "Needs pip install 'susurrus[ray]'.")
    r.add_argument("--address", default=None,
                   help="the Ray cluster to join: 'auto' (the one 'ray start' started on this machine) or "
                        "HEAD_IP:6379; default: start a local Ray with this machine's CPUs")
    r.add_argument("--host", default="127.0.0.1",
                   help="address Serve's HTTP proxy listens on (default: %(default)s; 0.0.0.0 for other machines)")
    r.add_argument("--port", type=int_range(1, 65535), default=8000, help="the proxy's port (default: %(default)s)")
    r.add_argument("--proxy-location", choices=["HeadOnly", "EveryNode"], default="HeadOnly",
                   help="where Serve runs HTTP proxies: on the head node only, or on every node (then every node "
                        "answers on --port; put a load balancer in front) (default: %(default)s)")
    _add_model_args(r, "torch threads in each replica (default: %(default)s)")
    r.add_argument("--sessions-per-replica", type=int_range(1), default=None,
                   help="real-time sessions one replica carries (its --max-sessions and Serve's "
                        "max_ongoing_requests); default 3, measured for tiny.en on one busy core "
                        "(benchmarks/ray_cluster.py prints a replica's CPU per audio second and the capacity it gives)")
    r.add_argument("--target-sessions", type=float_range(0.0, low_open=True), default=None,
                   help="autoscaling: open sessions per replica to aim for (default: 70%% of "
                        "--sessions-per-replica)")
    r.add_argument("--min-replicas", type=int_range(0), default=1, help="autoscaling floor (default: %(default)s)")
    r.add_argument("--max-replicas", type=int_range(1), default=4, help="autoscaling ceiling (default: %(default)s)")
    r.add_argument("--replicas", type=int_range(1), default=None,
                   help="a fixed number of replicas instead of autoscaling")
    r.add_argument("--cpus-per-replica", type=float_range(0.0, low_open=True), default=1.0,
                   help="Ray CPUs each replica reserves (default: %(default)s: a replica's streams use about one "
                        "core, the GIL)")
    r.add_argument("--gpus-per-replica", type=float_range(0.0), default=0.0,
                   help="Ray GPUs each replica reserves (ray_actor_options num_gpus; 1: each replica owns a card, "
                        "its model and sessions on it, with --device auto or cuda) (default: %(default)s: CPU only)")
    add_limit_args(r)
    r.add_argument("--drain-s", type=float_range(0.0), default=30.0,
                   help="a replica being removed (scale-down, Ctrl+C): after --scale-down-grace-s, each session's "
                        "open item is committed and transcribed within this many seconds, then the session is "
                        "closed (close code 1012) (default: %(default)s)")
    r.add_argument("--scale-down-grace-s", type=float_range(0.0), default=60.0,
                   help="a replica being removed lets its open sessions run on normally this long before its drain; "
                        "Serve kills a replica --scale-down-grace-s + --drain-s + 10 s after it began to remove it "
                        "(default: %(default)s)")
    r.set_defaults(func=cmd_serve_ray)

    e = sub.add_parser("example", help="print the path of the example clip shipped with susurrus (JFK, 11 s)",
                       description="Print the path of the example audio shipped with the package: 11 s of JFK's "
                                   "inaugural address (public domain, FLAC), for a first try of any command: "
                                   'susurrus transcribe "$(susurrus example)"')
    e.set_defaults(func=lambda args: print(__import__("susurrus").example_audio()) or 0)

    c = sub.add_parser("client", help="stream a file or the microphone to a realtime server",
                       description="Connect to a susurrus (or any OpenAI Realtime transcription) server, stream "
                                   "audio as one item (or, with --turns, as speech turns the server detects) and "
                                   "print committed text live (interim dimmed on a terminal).")
    c.add_argument("url", help="WebSocket URL, e.g. ws://127.0.0.1:8000/v1/realtime")
    c.add_argument("input", nargs="?", metavar="FILE", help="an audio file to stream")
    c.add_argument("--mic", action="store_true", help="stream the microphone (needs sounddevice) until Ctrl+C")
    c.add_argument("--realtime", action="store_true", help="pace a file at speaking speed")
    c.add_argument("--rate", type=int, choices=[16000, 24000], default=24000,
                   help="sample rate sent (default: %(default)s, OpenAI's)")
    c.add_argument("--block-ms", type=int_range(10, 10000, " ms"), default=100,
                   help="audio per append message (default: %(default)s)")
    c.add_argument("--latency", choices=["low", "medium", "high"], default=None, help="latency preset")
    c.add_argument("--language", type=language_arg, default=None,
                   help="language code or name (multilingual servers)")
    c.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    c.add_argument("--turns", action="store_true",
                   help="server turn detection (OpenAI server_vad): the server ends each speech turn after "
                        "500 ms of silence; one line per turn, with its span in seconds of the stream")
    c.set_defaults(func=cmd_client)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "device", AUTO) != AUTO:
            check_device(args.device)  # (cuda where torch sees none: one line, before any work)
        return args.func(args)
    except UsageError as err:  # a bad argument or input: one line, as argparse's own errors
        print(f"susurrus {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except FileNotFoundError as err:
        print(f"susurrus {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
