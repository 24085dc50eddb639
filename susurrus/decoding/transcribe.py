"""Offline transcription of whole files in sequential 30 s windows.

Each window is encoded once and decoded with temperature fallback (when the text is too
repetitive or too improbable); the window then advances to the last complete timestamp
(or by the whole window without timestamps) and the decoded text conditions the next
window. Segments are produced lazily, one window at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from susurrus.audio.features import (
    FRAMES_PER_SECOND,
    HOP_LENGTH,
    N_FRAMES,
    SAMPLE_RATE,
    log_mel_spectrogram,
    pad_or_trim,
)
from susurrus.decoding.alignment import (
    clamp_long_words,
    find_alignment,
    merge_punctuations,
    refine_with_energy,
    speech_frames,
)
from susurrus.decoding.decode import (
    DecodingOptions,
    DecodingResult,
    build_prompt,
    decode_window,
    detect_language,
)
from susurrus.model.tokenizer import TIME_PRECISION, Tokenizer
from susurrus.model.whisper import Whisper
from susurrus.types import Segment, TranscriptionInfo, Word

INPUT_STRIDE = 2  # mel frames per encoder frame / timestamp step


@dataclass(frozen=True)
class TranscribeOptions:
    language: str | None = None
    task: str = "transcribe"
    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float | None = None
    temperature: float | Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | None = None
    prefix: str | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    word_timestamps: bool = False
    # transcribe only the speech Silero VAD finds, as the stream does (``decoding/gate.py``):
    # silence and noise give no text; False transcribes every window, as Whisper does
    vad: bool = True


def decode_with_fallback(net: Whisper, tokenizer: Tokenizer, features: torch.Tensor,
                         prompt: list[int], opts: TranscribeOptions) -> DecodingResult:
    temperatures = ([opts.temperature] if isinstance(opts.temperature, (int, float))
                    else list(opts.temperature))
    base = DecodingOptions(beam_size=opts.beam_size, best_of=opts.best_of, patience=opts.patience,
                           length_penalty=opts.length_penalty, suppress_blank=opts.suppress_blank,
                           suppress_tokens=opts.suppress_tokens,
                           without_timestamps=opts.without_timestamps,
                           max_initial_timestamp=opts.max_initial_timestamp, seed=0)
    tried: list[DecodingResult] = []
    for t in temperatures:
        result = decode_window(net, tokenizer, features, prompt, replace(base, temperature=float(t)))[0]
        tried.append(result)
        too_repetitive = (opts.compression_ratio_threshold is not None
                          and result.compression_ratio > opts.compression_ratio_threshold)
        too_unlikely = (opts.log_prob_threshold is not None
                        and result.avg_logprob < opts.log_prob_threshold)
        silent = (opts.no_speech_threshold is not None and opts.log_prob_threshold is not None
                  and result.no_speech_prob > opts.no_speech_threshold and too_unlikely)
        if silent or not (too_repetitive or too_unlikely):
            return result
    fine = [r for r in tried if opts.compression_ratio_threshold is None
            or r.compression_ratio <= opts.compression_ratio_threshold]
    best = max(fine or tried, key=lambda r: r.avg_logprob)
    best.temperature = tried[-1].temperature
    return best


def _split_by_timestamps(tokenizer: Tokenizer, tokens: list[int], seek: int, segment_size: int,
                         ) -> tuple[list[tuple[float, float, list[int]]], int]:
    """Cut a window's tokens at timestamp pairs: ([(start, end, tokens)], frames to advance)."""
    ts = tokenizer.timestamp_begin
    offset = seek / FRAMES_PER_SECOND
    single_ending = len(tokens) >= 2 and tokens[-2] < ts <= tokens[-1]
    cuts = [i for i in range(1, len(tokens)) if tokens[i] >= ts and tokens[i - 1] >= ts]
    pieces: list[tuple[float, float, list[int]]] = []
    if cuts:
        slices = cuts + ([len(tokens)] if single_ending else [])
        last = 0
        for cut in slices:
            part = tokens[last:cut]
            start = offset + (part[0] - ts) * TIME_PRECISION
            end = offset + (part[-1] - ts) * TIME_PRECISION
            pieces.append((start, end, part))
            last = cut
        if single_ending:
            advance = segment_size
        else:
            advance = (tokens[last - 1] - ts) * INPUT_STRIDE
    else:
        duration = segment_size / FRAMES_PER_SECOND
        stamps = [t for t in tokens if t >= ts]
        if stamps and stamps[-1] != ts:
            duration = (stamps[-1] - ts) * TIME_PRECISION
        pieces.append((offset, offset + duration, tokens))
        advance = segment_size
    return pieces, advance


def transcribe(net: Whisper, tokenizer: Tokenizer, audio: np.ndarray,
               opts: TranscribeOptions) -> tuple[Iterator[Segment], TranscriptionInfo]:
    """Segments (lazy) and information about ``audio`` (16 kHz mono float32)."""
    mel = log_mel_spectrogram(audio, net.dims.n_mels)
    content_frames = max(0, len(audio) // HOP_LENGTH)
    duration = len(audio) / SAMPLE_RATE
    language, language_prob, all_probs = "en", 1.0, None
    first_features = None
    if net.is_multilingual:
        if opts.language is None:
            with torch.inference_mode():
                first_features = net.embed_audio(pad_or_trim(mel[:, :N_FRAMES])[None])
            all_probs = detect_language(net, tokenizer, first_features)
            language, language_prob = all_probs[0]
        else:
            language = opts.language
    tokenizer = tokenizer.with_options(language, opts.task)
    info = TranscriptionInfo(language=language, language_probability=language_prob,
                             duration=duration, task=opts.task if net.is_multilingual else "transcribe",
                             all_language_probs=all_probs)
    return _segments(net, tokenizer, mel, content_frames, opts, first_features, duration), info


def _clamped(words: list[Word] | None, limit: float) -> list[Word] | None:
    """Words with no time past ``limit`` (the end of the audio the window held)."""
    if words is None:
        return None
    return [w if w.end <= limit else replace(w, start=min(w.start, limit), end=limit) for w in words]


def _segments(net: Whisper, tokenizer: Tokenizer, mel: torch.Tensor, content_frames: int,
              opts: TranscribeOptions, first_features: torch.Tensor | None,
              duration: float) -> Iterator[Segment]:
    all_tokens: list[int] = []
    if opts.initial_prompt:
        all_tokens.extend(tokenizer.encode(" " + opts.initial_prompt.strip()))
    prompt_reset_since = 0
    seek = 0
    next_id = 0
    while seek < content_frames:
        segment_size = min(N_FRAMES, content_frames - seek)
        if seek == 0 and first_features is not None:
            features = first_features
        else:
            with torch.inference_mode():
                features = net.embed_audio(pad_or_trim(mel[:, seek:seek + segment_size])[None])
        prefix = tokenizer.encode(" " + opts.prefix.strip()) if opts.prefix and seek == 0 else None
        prompt = build_prompt(tokenizer, all_tokens[prompt_reset_since:], opts.without_timestamps,
                              net.dims.n_text_ctx, prefix)
        result = decode_with_fallback(net, tokenizer, features, prompt, opts)
        if opts.no_speech_threshold is not None and result.no_speech_prob > opts.no_speech_threshold:
            if opts.log_prob_threshold is None or result.avg_logprob < opts.log_prob_threshold:
                seek += segment_size
                continue
        previous_seek = seek
        pieces, advance = _split_by_timestamps(tokenizer, result.tokens, seek, segment_size)
        seek += advance
        words_per_piece: list[list[Word] | None] = [None] * len(pieces)
        if opts.word_timestamps:
            words_per_piece = _piece_words(net, tokenizer, features, pieces, previous_seek,
                                           segment_size, mel[:, previous_seek:previous_seek + segment_size])
            if not (len(result.tokens) >= 2 and result.tokens[-2] < tokenizer.timestamp_begin
                    <= result.tokens[-1]):
                last_end = next((w[-1].end for w in reversed(words_per_piece) if w), None)
                if last_end is not None and last_end > previous_seek / FRAMES_PER_SECOND:
                    seek = round(last_end * FRAMES_PER_SECOND)
        # a timestamp token can name any time in the 30 s window, also past the audio it held
        limit = round(min(duration, (previous_seek + segment_size) / FRAMES_PER_SECOND), 3)
        for (start, end, toks), words in zip(pieces, words_per_piece):
            text = tokenizer.decode(toks)
            if start == end or not text.strip():
                continue
            words = _clamped(words, limit)
            if words:
                start, end = words[0].start, words[-1].end
            start, end = min(start, limit), min(end, limit)
            yield Segment(id=next_id, seek=previous_seek, start=round(start, 3), end=round(end, 3),
                          text=text, tokens=[t for t in toks], avg_logprob=result.avg_logprob,
                          compression_ratio=result.compression_ratio,
                          no_speech_prob=result.no_speech_prob, temperature=result.temperature,
                          words=words)
            next_id += 1
        all_tokens.extend(result.tokens)
        if not opts.condition_on_previous_text or result.temperature > opts.prompt_reset_on_temperature:
            prompt_reset_since = len(all_tokens)


def _piece_words(net: Whisper, tokenizer: Tokenizer, features: torch.Tensor,
                 pieces: list[tuple[float, float, list[int]]], seek: int,
                 segment_size: int, window_mel: torch.Tensor) -> list[list[Word] | None]:
    """Align all the window's text at once, then hand each piece its words."""
    text_per_piece = [[t for t in toks if t < tokenizer.eot] for _, _, toks in pieces]
    flat = [t for toks in text_per_piece for t in toks]
    timings = find_alignment(net, tokenizer, flat, features, segment_size)
    merge_punctuations(timings)
    clamp_long_words(timings)
    refine_with_energy(timings, speech_frames(window_mel, segment_size))
    offset = seek / FRAMES_PER_SECOND
    out: list[list[Word] | None] = []
    cursor = 0
    for toks in text_per_piece:
        taken = 0
        words: list[Word] = []
        while cursor < len(timings) and taken < len(toks):
            w = timings[cursor]
            cursor += 1
            taken += len(w.tokens)
            if w.word:
                words.append(Word(start=round(offset + w.start, 3), end=round(offset + w.end, 3),
                                  word=w.word, probability=round(w.probability, 4)))
        out.append(words)
    return out
