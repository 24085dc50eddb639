"""Multilingual streams: language detection, accuracy beside offline, and translation.

Streams every non-English dev item through the multilingual ``base`` model without telling it
the language (it detects one per window from the first 3 s), and prints per item the language
detected, WER (CER for Chinese and Japanese) of the committed text beside the same model
offline (greedy, language detected as offline), then each stream again with ``task=translate``
and the WER of the streamed translation against the same model's offline translation, greedy
(what the stream decodes), the same without timestamp tokens (the stream decodes without them:
how far that alone moves offline's own translation), greedy with the temperature fallback (``susurrus transcribe --task
translate --beam-size 1``: when greedy is unsure the fallback samples, a draw, not a fixed text)
and as ``susurrus transcribe --task translate`` runs it by default (beam 5, fallback); and the
greedy translation over the window padded as openai-whisper pads it (digital silence, the
log-mel floor, where ``transcribe`` pads the normalised log-mel with zeros as faster-whisper
does; the stream pads at the floor too): how far the same weights' offline decodings spread.

    python benchmarks/multilingual.py [--model base] [--lookahead-ms 1000]
"""

from __future__ import annotations

import argparse

import torch

import susurrus
from susurrus.audio.features import log_mel_spectrogram
from susurrus.audio.io import decode_audio
from susurrus.decoding.decode import DecodingOptions, build_prompt, decode_window
from susurrus.evaluation.data import SHARED_DATA, read_manifest
from susurrus.evaluation.metrics import corpus_error_rate
from susurrus.streaming.encoder import encode_window
from susurrus.streaming.session import LanguageDetected

UNSPACED = {"zh", "ja", "th"}


def stream_text(model, audio, **settings) -> tuple[str, list[str]]:
    stream = model.stream(**settings)
    languages, block = [], stream.config.chunk_ms * 16
    for i in range(0, len(audio), block):
        languages += [e.language for e in stream.feed(audio[i:i + block]) if isinstance(e, LanguageDetected)]
    languages += [e.language for e in stream.finish() if isinstance(e, LanguageDetected)]
    return stream.text.strip(), languages


def floor_padded_translation(model, audio, language: str) -> str:
    """Greedy translation (timestamps on) of one window padded at the log-mel floor (openai-whisper's
    padding, and the stream's: :func:`~susurrus.streaming.encoder.encode_window`)."""
    features = encode_window(model.net, log_mel_spectrogram(audio, model.net.dims.n_mels))
    tok = model.tokenizer.with_options(language, "translate")
    with torch.inference_mode():
        result = decode_window(model.net, tok, features, build_prompt(tok, None, False), DecodingOptions())[0]
    return tok.decode([t for t in result.tokens if t < tok.timestamp_begin]).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(SHARED_DATA / "dev"))
    ap.add_argument("--model", default="base")
    ap.add_argument("--lookahead-ms", type=int, default=None, help="override the preset's look-ahead")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = susurrus.load_model(args.model)
    items = [i for i in read_manifest(args.manifest) if i.language != "en"]
    print("| item | language | detected (stream) | detected (offline) | unit | stream % | offline % |")
    print("|---|---|---|---|---|---|---|")
    translations = []
    for item in items:
        audio = decode_audio(item.audio)
        text, languages = stream_text(model, audio, lookahead_ms=args.lookahead_ms)

        segments, info = model.transcribe(audio, beam_size=1, temperature=0.0)
        offline = " ".join(s.text.strip() for s in segments)
        unit = "char" if item.language in UNSPACED else "word"
        ours = corpus_error_rate([(item.text, text)], item.language, unit)
        theirs = corpus_error_rate([(item.text, offline)], item.language, unit)
        print(f"| {item.id} | {item.language} | {', '.join(languages)} | {info.language} | "
              f"{'CER' if unit == 'char' else 'WER'} | {ours:.1f} | {theirs:.1f} |", flush=True)
        translated, _ = stream_text(model, audio, lookahead_ms=args.lookahead_ms, task="translate")
        greedy = " ".join(s.text.strip() for s in model.transcribe(audio, beam_size=1, temperature=0.0,
                                                                   task="translate")[0])
        plain = " ".join(s.text.strip() for s in model.transcribe(audio, beam_size=1, temperature=0.0,
                                                                  task="translate", without_timestamps=True)[0])
        default = " ".join(s.text.strip() for s in model.transcribe(audio, beam_size=1, task="translate")[0])
        beam = " ".join(s.text.strip() for s in model.transcribe(audio, task="translate")[0])
        floor = floor_padded_translation(model, audio, info.language)
        translations.append((item, text, translated, greedy, plain, default, beam, floor))
    print("\n| item | streamed transcript | streamed translation | offline translation, greedy | "
          "WER vs greedy % | offline greedy without timestamps (as the stream decodes) | its WER vs greedy % "
          "| offline translation, with fallback | WER vs fallback % "
          "| offline, beam 5 (the default) | WER vs beam 5 % | offline greedy, padded at the floor "
          "| greedy padded at the floor vs greedy % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for item, text, translated, greedy, plain, default, beam, floor in translations:
        to_greedy = corpus_error_rate([(greedy, translated)], "en", "word")
        plain_to_greedy = corpus_error_rate([(greedy, plain)], "en", "word")
        to_default = corpus_error_rate([(default, translated)], "en", "word")
        to_beam = corpus_error_rate([(beam, translated)], "en", "word")
        spread = corpus_error_rate([(greedy, floor)], "en", "word")
        print(f"| {item.id} | {text} | {translated} | {greedy} | {to_greedy:.1f} | {plain} | {plain_to_greedy:.1f} "
              f"| {default} | {to_default:.1f} "
              f"| {beam} | {to_beam:.1f} | {floor} | {spread:.1f} |")


if __name__ == "__main__":
    main()
