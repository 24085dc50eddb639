"""Non-speech streams: words invented and compute spent on silence, noise, music and chimes.

Each signal (``--minutes`` long, 10 by default) is streamed through one default stream in
``chunk_ms`` pieces (as fast as it computes, one thread) and the table gives per signal and
setting:

- ``words``: committed words (the target is at most 1 per 10 minutes), and the text;
- ``dropped``: words the hallucination guard refused (they never reach the caller);
- ``steps``: compute steps that ran (encode + decode), and the longest run of audio between
  two steps is implied by them: with VAD gating a stream of non-speech should run none;
- ``core-s / audio-s``: process CPU time (``time.process_time``, 1 torch thread) over the
  whole stream, VAD included, divided by its duration; ``% of speech``: that over the same
  measure on speech (the English dev items, each its own stream, same setting). The target
  with the default setting is at most 10 % on digital silence.

Signals (``susurrus.evaluation.signals``, RMS level in dBFS): digital silence; white noise
-20 and -60; pink noise -20, -40 and -60; synthetic music -20, -40 and -60 (the -60 ones are
what the VAD reads amplified, ``streaming/vad.py``); the two chimes moonshine-voice ships
(``moonshine_voice/assets/success.wav`` and ``error.wav``, resampled to 16 kHz) looped back
to back, and the same chimes each followed by 2 s of digital silence (a UI sound now and
then).

Settings: ``default`` (VAD gating + hallucination guard), ``no-guard`` (VAD gating only),
``no-vad`` (guard only: every step computed; the guard then knows only its phrase list) and
``raw`` (neither: plain incremental Whisper). The ungated settings cost a full stream's
compute per signal; ``--ungated-minutes`` shortens them.

    python benchmarks/nonspeech.py [--minutes 10] [--settings default,no-guard,no-vad,raw]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import susurrus
from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate

SETTINGS: dict[str, dict] = {
    "default": {},
    "no-guard": {"hallucination_guard": False},
    "no-vad": {"vad": False},
    "raw": {"vad": False, "hallucination_guard": False},
}
CHIMES = ("success.wav", "error.wav")  # moonshine-voice's non-speech assets (the others are speech)


def chimes(gap_s: float = 0.0) -> np.ndarray:
    """One cycle of moonshine-voice's packaged chimes at 16 kHz, each followed by ``gap_s`` of
    digital silence."""
    spec = importlib.util.find_spec("moonshine_voice")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("moonshine-voice is not installed (pip install moonshine-voice==0.1.5)")
    assets = Path(list(spec.submodule_search_locations)[0]) / "assets"
    pieces = []
    for name in CHIMES:
        pieces += [decode_audio(str(assets / name)), signals.silence(gap_s)]
    return np.concatenate(pieces).astype(np.float32)


def looped(cycle: np.ndarray, seconds: float) -> np.ndarray:
    n = int(round(seconds * 16000))
    return np.tile(cycle, -(-n // len(cycle)))[:n]


SIGNALS: dict[str, Callable[[float], np.ndarray]] = {
    "silence": signals.silence,
    "white -20": lambda s: signals.white_noise(s, level_dbfs=-20.0),
    "pink -20": lambda s: signals.pink_noise(s, level_dbfs=-20.0),
    "pink -40": lambda s: signals.pink_noise(s, level_dbfs=-40.0),
    "music -20": lambda s: signals.music(s, level_dbfs=-20.0),
    "music -40": lambda s: signals.music(s, level_dbfs=-40.0),
    # far below full scale: the VAD also reads them amplified (streaming/vad.py VAD_GAINS: the signals
    # at -40 and -60 peak under -12 dBFS; those at -20 peak at -6 to -8 and are read once)
    "white -60": lambda s: signals.white_noise(s, level_dbfs=-60.0),
    "pink -60": lambda s: signals.pink_noise(s, level_dbfs=-60.0),
    "music -60": lambda s: signals.music(s, level_dbfs=-60.0),
    "chimes": lambda s: looped(chimes(0.0), s),
    "chimes + 2 s": lambda s: looped(chimes(2.0), s),
}


@dataclass
class Run:
    audio_s: float
    cpu_s: float
    steps: int
    words: list
    dropped: list
    text: str


def stream_through(model, audio: np.ndarray, settings: dict, bar: tqdm | None = None) -> Run:
    stream = model.stream(**settings)
    piece = stream.config.chunk_ms * 16
    t0 = time.process_time()
    for i in range(0, len(audio), piece):
        stream.feed(audio[i:i + piece])
        if bar is not None:
            bar.update(len(audio[i:i + piece]) / 16000)
    stream.finish()
    cpu = time.process_time() - t0
    return Run(len(audio) / 16000, cpu, len(stream.stats), list(stream.words), list(stream.dropped), stream.text)


def speech_reference(model, settings: dict, items, clips) -> tuple[float, float, float]:
    """(core-s per audio-s, WER %, audio s) of the English dev items, each its own stream."""
    cpu = audio_s = 0.0
    pairs = []
    for item, audio in zip(items, tqdm(clips, desc="speech", unit="item", file=sys.stderr, leave=False)):
        r = stream_through(model, audio, settings)
        cpu += r.cpu_s
        audio_s += r.audio_s
        pairs.append((item.text, r.text))
    return cpu / audio_s, corpus_error_rate(pairs), audio_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--minutes", type=float, default=10.0, help="length of each signal with VAD gating")
    ap.add_argument("--ungated-minutes", type=float, default=None,
                    help="length of each signal for settings without VAD (default: --minutes)")
    ap.add_argument("--settings", default="default,no-guard,no-vad,raw")
    ap.add_argument("--signals", default=",".join(SIGNALS))
    ap.add_argument("--dev", default=str(SHARED_DATA / "dev"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = [i for i in read_manifest(args.dev) if i.language == "en"]
    clips = [decode_audio(str(i.audio)) for i in items]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    names = args.signals.split(",")
    print(f"{args.model} at {commit}, 1 thread, default chunk size pieces; speech: {len(items)} English dev items\n")
    rows, texts = [], []
    for setting in args.settings.split(","):
        settings = SETTINGS[setting]
        ref_cost, ref_wer, ref_s = speech_reference(model, settings, items, clips)
        rows.append((setting, f"speech ({ref_s:.0f} s dev, WER {ref_wer:.2f} %)", ref_s, None, None, None, ref_cost,
                     1.0))
        minutes = args.minutes if settings.get("vad", True) else (args.ungated_minutes or args.minutes)
        for name in names:
            audio = SIGNALS[name](minutes * 60)
            level = signals.rms_dbfs(audio)
            bar = tqdm(total=len(audio) // 16000, desc=f"{setting}: {name}", unit="s audio", file=sys.stderr,
                       leave=False)
            r = stream_through(model, audio, settings, bar)
            bar.close()
            cost = r.cpu_s / r.audio_s
            rows.append((setting, f"{name} ({level:.0f} dBFS)" if np.isfinite(level) else name, r.audio_s,
                         len(r.words), len(r.dropped), r.steps, cost, cost / ref_cost))
            if r.words or r.dropped:
                texts.append((setting, name, r.text.strip(), "".join(w.word for w in r.dropped).strip()))
            print(f"{setting:<9} {name:<14} words {len(r.words):>4} dropped {len(r.dropped):>4} steps {r.steps:>5} "
                  f"core-s/audio-s {cost:.4f} ({100 * cost / ref_cost:.1f} % of speech)", file=sys.stderr)
    print("| setting | signal | audio s | committed words | dropped by guard | steps | core-s / audio-s "
          "| % of speech |")
    print("|---|---|---|---|---|---|---|---|")
    for setting, name, audio_s, words, dropped, steps, cost, ratio in rows:
        cells = ["" if v is None else str(v) for v in (words, dropped, steps)]
        print(f"| {setting} | {name} | {audio_s:.0f} | {' | '.join(cells)} | {cost:.4f} | {100 * ratio:.1f} |")
    if texts:
        print("\n| setting | signal | committed text | dropped text |\n|---|---|---|---|")
        for setting, name, text, dropped in texts:
            print(f"| {setting} | {name} | {_cut(text)} | {_cut(dropped)} |")


def _cut(text: str, n: int = 160) -> str:
    words = text.split()
    if len(words) > 2 and len(set(words)) == 1:
        return f'"{words[0]}" × {len(words)}'
    text = text.replace("|", "\\|")
    return text if len(text) <= n else text[:n] + f"... ({len(text.split())} words)"


if __name__ == "__main__":
    main()
