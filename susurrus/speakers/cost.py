"""What speaker labels cost, measured (docs/benchmarks.md, "Speakers"):

- ``python -m susurrus.speakers.cost stream AUDIO [SECONDS]``: tiny.en at the default preset on
  one torch thread streams the first SECONDS of AUDIO without labels and with labels from each
  encoder (CAM++, the default; GE2E), twice each; CPU seconds of the process per audio second,
  and the labels' own (the thread time spent in the stream's label hook: windows, encoder,
  clustering, labels).
- ``python -m susurrus.speakers.cost memory [SECONDS]``: one tracker (no ASR) over the
  conversations of ``susurrus bench --diarize``, looped to SECONDS (3600 by default), fed in
  0.64 s steps with the conversations' Silero VAD and a word labelled every step; RSS and the
  tracker's state (audio, windows kept, speakers' sums and recent embeddings, queue) every 5
  minutes of audio.
- ``python -m susurrus.speakers.cost windows [AUDIO]``: each encoder (GE2E, CAM++ where its
  weights are installed) on ONNX Runtime and torch (CAM++ also on OpenVINO), one thread: CPU ms (thread time) a 1.6 s
  window, features included, in batches of 1, 2 and 4 (speech from AUDIO, JFK's by default)."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def stream_cost(path: str, seconds: float = 60.0, reps: int = 2) -> None:
    import torch

    import susurrus
    import susurrus.speakers.stream as hook
    from susurrus.audio.io import decode_audio
    from susurrus.speakers import make_tracker
    from susurrus.speakers.settings import ENCODER_NAMES

    torch.set_num_threads(1)
    audio = decode_audio(path)[: int(seconds * 16000)]
    model = susurrus.load_model("tiny.en", threads=1)
    spent = [0.0]
    inner = hook.label_events

    def timed(*a):
        t = time.thread_time()
        try:
            return inner(*a)
        finally:
            spent[0] += time.thread_time() - t

    hook.label_events = timed
    dur = len(audio) / 16000

    def run(encoder: str | None, blocks) -> tuple[float, object]:
        s = model.stream(speaker_tracker=make_tracker(encoder=encoder) if encoder is not None else None)
        t = time.process_time()
        list(s.events(blocks))
        return time.process_time() - t, s

    blocks = [audio[i: i + 1600] for i in range(0, len(audio), 1600)]
    for enc in ENCODER_NAMES:
        run(enc, blocks[:100])  # warm-up: each encoder loaded and exported
    print("| run | stream + labels core-s per audio s | labels' own | windows | batches |")
    print("|---|---|---|---|---|")
    for _ in range(reps):
        for encoder in (None, *ENCODER_NAMES):
            spent[0] = 0.0
            cpu, s = run(encoder, blocks)
            t = getattr(s, "tracker", None)
            extra = f"{spent[0] / dur:.4f} | {t.embedded} | {t.batches}" if t is not None else "| |"
            print(f"| {encoder or 'without labels'} | {cpu / dur:.4f} | {extra} |", flush=True)


def window_cost(path: str = "../shared/data/dev/audio/jfk_inaugural.wav", reps: int = 20) -> None:
    import torch

    from susurrus.audio.io import decode_audio
    from susurrus.speakers.encoder import PARTIAL_SAMPLES, SpeakerEncoderMissing, embed_partials
    from susurrus.speakers.settings import ENCODER_NAMES

    torch.set_num_threads(1)
    x = decode_audio(path)
    pieces = [x[i: i + PARTIAL_SAMPLES] for i in range(0, 4 * 8000, 8000)]
    print("| encoder | runtime | batch | CPU ms a window |")
    print("|---|---|---|---|")
    for enc in ENCODER_NAMES:
        for runtime in ("openvino", "ort", "torch") if enc == "campplus" else ("ort", "torch"):
            for batch in (1, 2, 4):
                try:
                    embed_partials(pieces[:batch], runtime=runtime, encoder=enc)  # loaded, exported
                except SpeakerEncoderMissing as e:
                    print(f"| {enc} | {runtime} | | not installed: {e} |")
                    break
                t = time.thread_time()
                for _ in range(reps):
                    embed_partials(pieces[:batch], runtime=runtime, encoder=enc)
                print(f"| {enc} | {runtime} | {batch} | {(time.thread_time() - t) / reps / batch * 1000:.1f} |",
                      flush=True)


def memory(seconds: float = 3600.0) -> None:
    import resource

    import torch

    from susurrus.speakers import conversations as conv_mod
    from susurrus.speakers import make_tracker
    from susurrus.speakers.bench import _voiced_fn

    torch.set_num_threads(1)

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def state_kb(t) -> float:
        n = t.audio.nbytes + sum(w.embedding.nbytes for w in t.windows) + sum(s.nbytes for s in t.clusters.sums)
        n += sum(p.nbytes for *_, p in t.queue) + sum(e.nbytes for m in t.clusters.members for e in m)
        if t.reclustered is not None:
            r = t.reclustered
            n += sum(w.embedding.nbytes for w in r.recent) + sum(e.nbytes for es in r.exemplars.values() for e in es)
        return n / 1024

    convs = [conv_mod.load(p) for p in sorted(conv_mod.CACHE.glob("*.json"))]
    if not convs:
        raise SystemExit(f"no conversations in {conv_mod.CACHE}: run susurrus bench --diarize DATA_ROOT first")
    vads = [_voiced_fn(c.audio)[0] for c in convs]
    tracker = make_tracker()
    step, total, shown, i = 10240, 0.0, 0.0, 0
    t0 = time.process_time()

    def show(now: float) -> None:
        print(f"| {now / 60:.0f} | {rss_mb():.0f} | {state_kb(tracker):.0f} | {len(tracker.windows)} "
              f"| {tracker.speakers_found} | {tracker.embedded} | {time.process_time() - t0:.0f} |", flush=True)

    print("| audio min | RSS MB | tracker state KB | windows kept | speakers | windows embedded | CPU s |")
    print("|---|---|---|---|---|---|---|")
    while total < seconds:
        c, v = convs[i % len(convs)], vads[i % len(vads)]
        i += 1
        for j in range(0, len(c.audio), step):
            tracker.push(c.audio[j: j + step], lambda a, b, base=total, v=v: v(a - base, b - base))
            now = total + (j + step) / 16000
            tracker.label([(now - 1.5, now - 1.0)])
            if now >= shown:
                show(now)
                shown += 300.0
        total += len(c.audio) / 16000
    show(total)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    what, *rest = sys.argv[1:] or ["memory"]
    if what == "stream":
        stream_cost(rest[0], *(float(x) for x in rest[1:2]))
    elif what == "windows":
        window_cost(*rest[:1])
    elif what == "memory":
        memory(*(float(x) for x in rest[:1]))
    else:
        raise SystemExit(__doc__)
