"""Fuzz the realtime WebSocket protocol and the REST upload with a large budget: the fuzzer of
``tests/protocol_fuzz.py`` (the test suite runs it with a small one) at its four depths, each for
a share of the time, then a normal session on the same server. Prints a table: cases, events,
errors by code, crashes, hangs, broken promises, wall time; the unhandled exceptions the server
logged meanwhile (the worker processes' own tracebacks go to stderr: keep it, ``2> fuzz.err``);
and the first problems found, with their cases.

    python benchmarks/fuzz_protocol.py --minutes 10
    python benchmarks/fuzz_protocol.py --examples 500 --seed 1
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fuzzer lives beside the tests

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from protocol_fuzz import (  # noqa: E402
    CaseResult,
    form_cases,
    protocol_cases,
    run_form,
    run_protocol,
    run_rest,
    run_server,
    run_transcribed,
    run_upload,
    speech_cases,
    transcribed_cases,
    upload_bytes,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SPEECH = DATA / "dev" / "audio" / "ljspeech_LJ001-0008.wav"  # 1.8 s
FINAL = DATA / "dev" / "audio" / "ljspeech_LJ001-0002.wav"  # 1.9 s: "in being comparatively modern."
SHARES = {"protocol": 0.25, "transcribed": 0.25, "server": 0.35, "form": 0.03, "upload": 0.04, "rest": 0.08}


class OutOfTime(Exception):
    pass


class Unhandled(logging.Handler):
    """Counts what the server process reports as an unhandled error while the fuzz runs: log records
    at ERROR or above, or carrying a traceback, on the root logger and on uvicorn's (which does not
    propagate; ``Exception in ASGI application``), and exceptions that end a thread."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.seen.append(f"{record.name}: {record.getMessage()[:300]}")

    def attach(self) -> None:
        for name in ("", "uvicorn", "asyncio"):
            logging.getLogger(name).addHandler(self)
        previous = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            self.seen.append(f"thread {args.thread.name if args.thread else '?'}: "
                             f"{args.exc_type.__name__}: {args.exc_value}")
            previous(args)

        threading.excepthook = hook


def fuzz(name: str, strategy: st.SearchStrategy, run, examples: int, seconds: float, seed_value: int
         ) -> tuple[CaseResult, int, list[tuple[str, object]]]:
    """Run ``run`` on up to ``examples`` cases of ``strategy`` for at most ``seconds``; totals."""
    total, cases, found = CaseResult(), 0, []
    stop = time.monotonic() + seconds

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(case) -> None:
        nonlocal cases
        if time.monotonic() > stop:
            raise OutOfTime
        r = run(case)
        cases += 1
        total.steps += r.steps
        total.events += r.events
        total.errors.update(r.errors)
        total.crashes += r.crashes
        total.hangs += r.hangs
        total.violations += r.violations
        if not r.ok and len(found) < 5:
            found.append((r.problems()[0], case))

    t0 = time.monotonic()
    try:
        one()
    except OutOfTime:
        pass
    total.wall_s = time.monotonic() - t0
    return total, cases, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="time for all depths together")
    parser.add_argument("--examples", type=int, default=100_000, help="at most this many cases per depth")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated depths: " + ",".join(SHARES))
    args = parser.parse_args()

    from server_helpers import pcm16_at, server_samples, stream_text, words

    import susurrus
    from susurrus.audio.io import decode_audio
    from susurrus.client import session_update
    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits
    from susurrus.server.realtime.transcriber import _stream_kwargs
    from susurrus.server.rest.jobs import UploadLimits

    tiny = susurrus.load_model("tiny.en")
    audio = decode_audio(SPEECH)
    speech = {rate: pcm16_at(audio, rate) for rate in (16000, 24000)}
    cache: dict = {}

    def expected(rate, config) -> str:
        if (rate, config) not in cache:
            stream = tiny.stream(**_stream_kwargs(config))
            samples = server_samples(speech[rate], rate)
            for i in range(0, len(samples), config.chunk_ms * 16):
                stream.feed(samples[i:i + config.chunk_ms * 16])
            stream.finish()
            cache[(rate, config)] = stream.text.strip()
        return cache[(rate, config)]

    small = Limits(max_message_bytes=64 * 1024, max_buffered_s=2.0)
    limits = Limits(max_message_bytes=256 * 1024, max_buffered_s=30.0, max_sessions=8)
    depths = [d for d in SHARES if args.only is None or d in args.only.split(",")]
    budget = args.minutes * 60 / sum(SHARES[d] for d in depths)
    rows, found, t_all = [], [], time.monotonic()
    unhandled = Unhandled()
    with BackgroundServer(tiny, limits=limits, workers=2) as srv:
        unhandled.attach()  # after uvicorn configured its loggers
        plan = {
            "protocol": (protocol_cases(small.max_message_bytes), lambda c: run_protocol(c, small)),
            "transcribed": (transcribed_cases(small.max_message_bytes), lambda c: run_transcribed(c, tiny, small)),
            "server": (speech_cases(limits.max_message_bytes, pieces=3),
                       lambda c: run_server(c, srv, speech, expected)),
            "form": (form_cases(), lambda c: run_form(c, tiny)),
            "upload": (upload_bytes(), lambda c: run_upload(c, UploadLimits(max_seconds=30))),
            "rest": (st.tuples(form_cases(), upload_bytes()), lambda c: run_rest(c[0], c[1], srv.http_url)),
        }
        for depth in depths:
            strategy, run = plan[depth]
            total, cases, problems = fuzz(depth, strategy, run, args.examples, budget * SHARES[depth], args.seed)
            rows.append((depth, cases, total))
            found += [(depth, *p) for p in problems]
            print(f"  {depth}: {cases} cases in {total.wall_s:.0f} s", flush=True)
        # after all of it, a normal session transcribes a real recording
        from server_helpers import Conn

        pcm = pcm16_at(decode_audio(FINAL), 24000)
        with Conn(srv.url) as c:
            c.until("session.created")
            c.send(session_update(24000))
            c.append(pcm, 2400)
            c.send({"type": "input_audio_buffer.commit"})
            done = c.until("conversation.item.input_audio_transcription.completed")["transcript"]
        final_ok = done == stream_text(tiny, server_samples(pcm, 24000)) and \
            words(done) == words("in being comparatively modern.")

    print(f"\nFuzzing the realtime protocol and the REST upload: seed {args.seed}, "
          f"{(time.monotonic() - t_all) / 60:.1f} min\n")
    print("| depth | cases | client frames | server events | crashes | hangs | broken promises | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for depth, cases, t in rows:
        print(f"| {depth} | {cases} | {t.steps} | {t.events} | {len(t.crashes)} | {len(t.hangs)} | "
              f"{len(t.violations)} | {t.wall_s:.0f} |")
    codes = Counter()
    for _, _, t in rows:
        codes.update(t.errors)
    print("\n| error code | count |\n|---|---:|")
    for code, n in codes.most_common():
        print(f"| {code} | {n} |")
    print(f"\nafter the fuzz, a normal session transcribed LJ001-0002 correctly: {final_ok} ({done!r})")
    print(f"unhandled exceptions logged by the server (ERROR records, tracebacks, thread deaths): "
          f"{len(unhandled.seen)}")
    for line in unhandled.seen[:5]:
        print(f"  {line}")
    for depth, problem, case in found:
        print(f"\n[{depth}] {problem[:400]}\n  case: {case!r:.1500}")


if __name__ == "__main__":
    main()
