"""Turn-end latency of the realtime server, as a voice agent sees it: how long after the user
stops speaking the final transcript of the turn (``...transcription.completed``) arrives.

``susurrus serve`` runs as a subprocess on loopback (its defaults: one worker process per core);
N concurrent clients play real speech into it over the Realtime WebSocket at real-time pace
(16 kHz PCM16, 100 ms appends, each client starting at a random offset within a second). Each
client plays a conversation: turns, each followed by ``--gap-s`` of silence (the agent's answer).
Turns: the utterances of the long-form streams (their manifest segments, with 0.2 s of context
either side) and hard/'s conversational items, dealt round-robin to the clients.

The end of a turn's speech is the end of its last word, from the offline transcription of the
turn's audio span (``model.transcribe(word_timestamps=True)``, greedy with the fallback as the
REST API's default, the server's model); that text is
also the reference of the turn-text WER ("vs offline"), beside the WER of both against the
manifest text.

Modes:

``client``: ``turn_detection: null``; the client commits 200 ms into each pause (after the last
word's end), as voice-agent frameworks do with their own VAD. Reported: commit -> ``completed``
(wall clock), and TTFS as the public streaming benchmark counts it (end of speech -> final:
the 200 ms of the client's VAD plus commit -> ``completed``).

``server_vad`` / ``semantic_vad`` (OpenAI's defaults: 500 ms of silence; eagerness auto): the
client only streams. Reported: end of the last word -> ``completed`` of the turn (the turn's
last item, when the server split it), which includes the silence the detector waits for.

Every latency is wall clock at the client: the audio at time t of the client's stream is taken
as available when the append holding it is sent, so a 100 ms append counts from its end.

    python benchmarks/turn_latency.py --model tiny.en --sessions 1,8,16 --modes client,server_vad,semantic_vad
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import launch  # noqa: E402 - benchmarks/launch.py

from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate  # noqa: E402

SR = 16000
BLOCK_S = 0.1
CONTEXT_S = 0.2  # audio kept either side of a segment
CLIENT_VAD_S = 0.2  # the client commits this long after the last word ends
COMPLETED = "conversation.item.input_audio_transcription.completed"


@dataclass
class Turn:
    id: str
    audio: np.ndarray  # 16 kHz float32, the span
    text: str  # manifest text
    offline: str = ""  # offline transcription of the span
    last_word_end: float = 0.0  # seconds into the span


@dataclass
class Played:
    """One turn as a client played it, and what came back."""

    turn: Turn
    start: float  # seconds into the client's stream
    end_speech: float  # the last word's end, seconds into the stream
    end_wall: float = 0.0  # loop time at which the audio at end_speech was sent
    commit_wall: float = 0.0  # mode client: loop time of the commit
    done_wall: float = 0.0  # loop time of the turn's (last) completed
    texts: list[str] = field(default_factory=list)


def turns_of(longform: bool = True, hard: bool = True) -> list[Turn]:
    """Every turn of the data, the sources interleaved (so a few clients hear each of them)."""
    sources: list[list[Turn]] = []
    if longform:
        for item in read_manifest(SHARED_DATA / "longform" / "manifest.jsonl"):
            sources.append(turns := [])
            audio = decode_audio(str(item.audio))
            segs = item.segments or []
            for k, seg in enumerate(segs):
                lo = seg["start_s"] - CONTEXT_S
                hi = seg["end_s"] + CONTEXT_S
                if k:  # not into the previous utterance
                    lo = max(lo, (segs[k - 1]["end_s"] + seg["start_s"]) / 2)
                if k + 1 < len(segs):
                    hi = min(hi, (seg["end_s"] + segs[k + 1]["start_s"]) / 2)
                span = audio[max(0, round(lo * SR)):round(hi * SR)]
                turns.append(Turn(f"{item.id}#{k}", span, seg["text"]))
    if hard:
        sources.append([Turn(item.id, decode_audio(str(item.audio)), item.text)
                        for item in read_manifest(SHARED_DATA / "hard" / "manifest.jsonl")
                        if "conversational" in item.condition])
    return [src[k] for k in range(max(map(len, sources))) for src in sources if k < len(src)]


def reference(model, turns: list[Turn], cache: Path | None) -> None:
    """Each turn's offline transcription and last word's end (``cache``: a JSON file of them, by id)."""
    known = json.loads(cache.read_text()) if cache is not None and cache.exists() else {}
    for t in turns:
        if t.id not in known:
            segments, _ = model.transcribe(t.audio, language="en", word_timestamps=True, beam_size=1)
            segments = list(segments)
            words = [w for s in segments for w in (s.words or [])]
            known[t.id] = ["".join(s.text for s in segments).strip(),
                           words[-1].end if words else len(t.audio) / SR]
        t.offline, t.last_word_end = known[t.id]
    if cache is not None:
        cache.write_text(json.dumps(known))


def conversation(turns: list[Turn], gap_s: float, lead_s: float = 0.5) -> tuple[np.ndarray, list[Played]]:
    pieces, played, t = [np.zeros(round(lead_s * SR), np.float32)], [], lead_s
    for turn in turns:
        played.append(Played(turn, t, t + turn.last_word_end))
        pieces += [turn.audio, np.zeros(round(gap_s * SR), np.float32)]
        t += len(turn.audio) / SR + gap_s
    pieces.append(np.zeros(round(1.0 * SR), np.float32))  # the last turn's silence
    return np.concatenate(pieces), played


def pcm16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767).astype(np.int16)


def append(pcm: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm.tobytes()).decode()})


async def play(url: str, mode: str, audio: np.ndarray, played: list[Played], delay: float) -> dict:
    import websockets

    turn_detection = None if mode == "client" else {"type": mode}
    pcm = pcm16(audio)
    loop = asyncio.get_running_loop()
    commits = [round((p.end_speech + CLIENT_VAD_S) * SR) for p in played] if mode == "client" else []
    stats = {"errors": []}
    await asyncio.sleep(delay)
    async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": SR}, "turn_detection": turn_detection,
            "transcription": {"model": "whisper", "language": "en"}}}}}))
        committed: list[str] = []  # mode client: item ids in commit order
        starts: dict[str, float] = {}  # server turns: item id -> audio_start_ms
        done: dict[str, tuple[float, str]] = {}  # item id -> (loop time, transcript)
        finished = asyncio.Event()

        async def receive() -> None:
            async for message in ws:
                event = json.loads(message)
                kind = event.get("type")
                if kind == COMPLETED:
                    done[event["item_id"]] = (loop.time(), event.get("transcript", ""))
                    if mode == "client" and len(done) >= len(played):
                        finished.set()
                elif kind == "input_audio_buffer.committed" and mode == "client":
                    committed.append(event["item_id"])
                elif kind == "input_audio_buffer.speech_started":
                    starts[event["item_id"]] = event["audio_start_ms"] / 1000
                elif kind == "error":
                    if event["error"].get("event_id") == "end":  # the closing commit: nothing left open
                        finished.set()
                    else:
                        stats["errors"].append(event["error"].get("code"))

        receiver = asyncio.create_task(receive())
        t0 = loop.time()
        cuts = sorted(set(range(0, len(pcm), round(BLOCK_S * SR))) | set(commits) | {len(pcm)})
        ends = [round(p.end_speech * SR) for p in played]
        for a, b in zip(cuts, cuts[1:]):
            await asyncio.sleep(max(0.0, t0 + b / SR - loop.time()))  # the audio up to b was "recorded"
            await ws.send(append(pcm[a:b]))
            now = loop.time()
            for p, e in zip(played, ends):
                if a < e <= b:
                    p.end_wall = now - (b - e) / SR
            if b in commits:
                await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                played[commits.index(b)].commit_wall = loop.time()
        if mode != "client":  # a commit that finds nothing open: its error comes after everything
            await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "end"}))
        try:
            await asyncio.wait_for(finished.wait(), 120)
        except asyncio.TimeoutError:
            stats["errors"].append("timeout")
        receiver.cancel()
    if mode == "client":
        for p, item_id in zip(played, committed):
            if item_id in done:
                p.done_wall, text = done[item_id]
                p.texts.append(text)
    else:
        for k, p in enumerate(played):
            hi = played[k + 1].start - 0.5 if k + 1 < len(played) else float("inf")
            mine = sorted((s, i) for i, s in starts.items() if p.start - 0.5 <= s < hi and i in done)
            p.texts = [done[i][1] for _, i in mine]
            if mine:
                p.done_wall = done[mine[-1][1]][0]
    return stats


def start_server(model: str, extra: list[str], code: Path = REPO) -> tuple[subprocess.Popen, int]:
    return launch.start_server(["--model", model, "--max-sessions", "64", "--log-level", "warning", *extra], code,
                               env={**os.environ, "PYTHONPATH": str(code)})


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def run(port: int, mode: str, turns: list[Turn], sessions: int, per_session: int, gap_s: float, seed: int) -> dict:
    rng = random.Random(seed)
    plays = []
    for s in range(sessions):
        mine = [turns[(s + k * sessions) % len(turns)] for k in range(per_session)]
        plays.append(conversation(mine, gap_s))

    async def all_clients() -> list[dict]:
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        return await asyncio.gather(*(play(url, mode, a, p, rng.random()) for a, p in plays))

    load = os.getloadavg()[0]
    stats = asyncio.run(all_clients())
    played = [p for _, ps in plays for p in ps]
    ok = [p for p in played if p.done_wall]
    lat = [(p.done_wall - (p.commit_wall if mode == "client" else p.end_wall)) * 1000 for p in ok]
    ttfs = [(p.done_wall - p.end_wall) * 1000 for p in ok]
    pairs = [(p.turn.offline, " ".join(p.texts)) for p in played]
    return {"mode": mode, "sessions": sessions, "turns": len(played), "missing": len(played) - len(ok),
            "p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99),
            "ttfs50": pct(ttfs, 50), "ttfs95": pct(ttfs, 95),
            "wer_vs_offline": corpus_error_rate(pairs),
            "wer_stream": corpus_error_rate([(p.turn.text, " ".join(p.texts)) for p in played]),
            "wer_offline": corpus_error_rate([(p.turn.text, p.turn.offline) for p in played]),
            "errors": sorted({e for s in stats for e in s["errors"]}), "load": load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--sessions", default="1,8,16", help="concurrent client counts, comma-separated")
    ap.add_argument("--modes", default="client,server_vad,semantic_vad")
    ap.add_argument("--turns", type=int, default=5, help="turns each client plays")
    ap.add_argument("--gap-s", type=float, default=1.5, help="silence after each turn")
    ap.add_argument("--server-args", default="", help="extra `susurrus serve` arguments")
    ap.add_argument("--server-code", type=Path, default=REPO,
                    help="the susurrus package the server runs from (another checkout: a before/after comparison)")
    ap.add_argument("--no-hard", action="store_true", help="leave out hard/'s conversational items")
    ap.add_argument("--cache", type=Path, default=None,
                    help="JSON file of the offline references, by turn (default /tmp/turn_latency_MODEL.json)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()

    from susurrus.api import load_model

    t = time.perf_counter()
    model = load_model(args.model)
    turns = turns_of(hard=not args.no_hard)
    most = max(int(x) for x in args.sessions.split(",")) * args.turns
    turns = turns[:most] if len(turns) > most else turns
    reference(model, turns, args.cache or Path(f"/tmp/turn_latency_{args.model}.json"))
    del model
    print(f"{len(turns)} turns, offline references in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    server, port = start_server(args.model, args.server_args.split(), args.server_code)
    rows = []
    try:
        for n in (int(x) for x in args.sessions.split(",")):
            for mode in args.modes.split(","):
                row = run(port, mode, turns, n, args.turns, args.gap_s, seed=n)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(60)
    print(f"\n{args.model}, `susurrus serve` defaults, {args.turns} turns per client, {args.gap_s:g} s after each\n")
    print("| sessions | mode | turns | latency p50 / p95 / p99 (ms) | TTFS p50 / p95 (ms) | WER vs offline "
          "| WER stream / offline vs reference | 1-min load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        what = "commit -> completed" if r["mode"] == "client" else "last word -> completed"
        miss = f" ({r['missing']} missing)" if r["missing"] else ""
        print(f"| {r['sessions']} | {r['mode']} ({what}) | {r['turns']}{miss} | {r['p50']:.0f} / {r['p95']:.0f} / "
              f"{r['p99']:.0f} | {r['ttfs50']:.0f} / {r['ttfs95']:.0f} | {r['wer_vs_offline']:.1f} % "
              f"| {r['wer_stream']:.1f} / {r['wer_offline']:.1f} % | {r['load']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
