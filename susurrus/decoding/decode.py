"""Decoding one 30 s window: greedy, beam search or sampling over the cached decoder.

The decoder cache (:class:`~susurrus.model.caches.DecoderCache`) is created once per window
from the audio features, then grown one token per step; beam search reorders it with
``select``. Logit rules follow Whisper: suppress blank at the start, suppress non-speech and
special tokens, and keep timestamp tokens well formed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
from torch import Tensor

from susurrus.model.caches import DecoderCache
from susurrus.model.tokenizer import TIME_PRECISION, Tokenizer
from susurrus.model.whisper import Whisper, to_host


@dataclass(frozen=True)
class DecodingOptions:
    temperature: float = 0.0
    beam_size: int = 1  # 1: greedy (at temperature 0)
    best_of: int = 1  # independent samples at temperature > 0
    patience: float = 1.0
    length_penalty: float | None = None  # None: average log-probability per token
    sample_len: int | None = None  # new tokens at most (default: half the text context)
    suppress_tokens: tuple[int, ...] | None = (-1,)  # -1: the non-speech symbols
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    seed: int | None = None


@dataclass
class DecodingResult:
    tokens: list[int]  # sampled tokens, without the prompt or end-of-text
    sum_logprob: float
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    text: str = ""
    compression_ratio: float = 0.0
    extra: dict = field(default_factory=dict)


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / max(1, len(zlib.compress(raw)))


def build_prompt(tokenizer: Tokenizer, previous: list[int] | None, without_timestamps: bool,
                 max_context: int = 448, prefix: list[int] | None = None) -> list[int]:
    """[<|startofprev|> previous...] <|startoftranscript|> [lang task] [<|notimestamps|>] [prefix]"""
    prompt: list[int] = []
    if previous:
        prompt.append(tokenizer.sot_prev)
        prompt.extend(previous[-(max_context // 2 - 1):])
    prompt.extend(tokenizer.sot_sequence)
    if without_timestamps:
        prompt.append(tokenizer.no_timestamps)
    if prefix:
        if not without_timestamps:
            prompt.append(tokenizer.timestamp_begin)
        prompt.extend(prefix)
    return prompt


class LogitRules:
    """Whisper's logit filters for one window, applied to (batch, vocab) logits in place."""

    def __init__(self, tokenizer: Tokenizer, options: DecodingOptions, sample_begin: int,
                 n_vocab: int):
        self.tok = tokenizer
        self.options = options
        self.sample_begin = sample_begin
        suppress: set[int] = set()
        if options.suppress_tokens:
            requested = list(options.suppress_tokens)
            if -1 in requested:
                requested = [t for t in requested if t >= 0] + tokenizer.non_speech_tokens
            suppress.update(requested)
        suppress.update([tokenizer.transcribe, tokenizer.translate, tokenizer.sot,
                         tokenizer.sot_prev, tokenizer.sot_lm, tokenizer.no_speech])
        self.suppress = torch.tensor(sorted(t for t in suppress if t < n_vocab), dtype=torch.long)
        self.blank = tokenizer.encode(" ") + [tokenizer.eot]
        self.max_initial = (None if options.max_initial_timestamp is None else
                            round(options.max_initial_timestamp / TIME_PRECISION))

    def __call__(self, logits: Tensor, tokens: list[list[int]]) -> None:
        tok = self.tok
        length = len(tokens[0])
        if self.options.suppress_blank and length == self.sample_begin:
            logits[:, self.blank] = -float("inf")
        logits[:, self.suppress] = -float("inf")
        ts = tok.timestamp_begin
        if self.options.without_timestamps:
            logits[:, ts:] = -float("inf")
            return
        logits[:, tok.no_timestamps] = -float("inf")
        for k, seq in enumerate(tokens):
            sampled = seq[self.sample_begin:]
            last_ts = len(sampled) >= 1 and sampled[-1] >= ts
            penult_ts = len(sampled) < 2 or sampled[-2] >= ts
            if last_ts:
                if penult_ts:  # a pair closed: text (or end) must follow
                    logits[k, ts:] = -float("inf")
                else:  # an open timestamp: another timestamp or end-of-text must follow
                    logits[k, :tok.eot] = -float("inf")
            stamps = [t for t in sampled if t >= ts]
            if stamps:
                floor = stamps[-1] if (last_ts and not penult_ts) else stamps[-1] + 1
                logits[k, ts:floor] = -float("inf")
        if length == self.sample_begin:
            logits[:, :ts] = -float("inf")
            if self.max_initial is not None:
                logits[:, ts + self.max_initial + 1:] = -float("inf")
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        for k in range(logits.shape[0]):
            ts_mass = torch.logsumexp(logprobs[k, ts:], dim=-1)
            if ts_mass > logprobs[k, :ts].max():
                logits[k, :ts] = -float("inf")


@torch.inference_mode()
def detect_language(net: Whisper, tokenizer: Tokenizer, audio_features: Tensor | None = None,
                    cache: DecoderCache | None = None) -> list[tuple[str, float]]:
    """Language probabilities from the logits after <|startoftranscript|>, most likely first,
    over ``audio_features`` or an existing decoder ``cache`` (its cross keys/values)."""
    if not net.is_multilingual:
        return [("en", 1.0)]
    tokens = torch.tensor([[tokenizer.sot]], device=net.device)
    if cache is None:
        cache = net.decoder.new_cache(audio_features)
    logits, _, _ = net.decoder(tokens, DecoderCache(cache.cross, [None] * len(cache.self_kv)))
    logits = to_host(logits)
    lang_tokens = torch.tensor(tokenizer.language_tokens)
    probs = logits[0, -1, lang_tokens].softmax(dim=-1)
    order = probs.argsort(descending=True)
    return [(tokenizer.language_codes[int(i)], float(probs[i])) for i in order]


@torch.inference_mode()
def decode_window(net: Whisper, tokenizer: Tokenizer, audio_features: Tensor,
                  prompt: list[int], options: DecodingOptions) -> list[DecodingResult]:
    """Decode one window; returns candidates best first (one, or ``best_of`` when sampling)."""
    n_ctx = net.dims.n_text_ctx
    sample_len = options.sample_len or n_ctx // 2
    max_len = min(len(prompt) + sample_len, n_ctx)
    rules = LogitRules(tokenizer, options, len(prompt), net.dims.n_vocab)
    cache = net.decoder.new_cache(audio_features)
    logits, cache, _ = net.decoder(torch.tensor([prompt], device=net.device), cache)
    logits = to_host(logits)  # (the logit rules and the choice of tokens run on the host)
    sot_index = prompt.index(tokenizer.sot)
    no_speech_prob = float(logits[0, sot_index].softmax(-1)[tokenizer.no_speech])
    first = logits[:, -1]
    if options.temperature > 0 or options.beam_size <= 1:
        n = max(1, options.best_of) if options.temperature > 0 else 1
        results = _sample(net, rules, cache, first, prompt, n, max_len, options, tokenizer.eot)
    else:
        results = _beam_search(net, rules, cache, first, prompt, max_len, options, tokenizer.eot)
    for r in results:
        r.no_speech_prob = no_speech_prob
        r.text = tokenizer.decode(r.tokens).strip()
        r.compression_ratio = compression_ratio(r.text)
    return results


def _score(result: DecodingResult, length_penalty: float | None) -> float:
    length = len(result.tokens) + 1
    if length_penalty is None:
        return result.sum_logprob / length
    return result.sum_logprob / (((5 + length) / 6) ** length_penalty)


def _sample(net: Whisper, rules: LogitRules, cache: DecoderCache, logits: Tensor,
            prompt: list[int], n: int, max_len: int, options: DecodingOptions,
            eot: int) -> list[DecodingResult]:
    """Greedy (temperature 0) or temperature sampling of ``n`` independent sequences."""
    if n > 1:
        index = torch.zeros(n, dtype=torch.long, device=net.device)
        cache = cache.select(index)
        logits = logits.expand(n, -1)
    generator = torch.Generator().manual_seed(options.seed) if options.seed is not None else None
    seqs = [list(prompt) for _ in range(n)]
    sums = [0.0] * n
    done = [False] * n
    length = len(prompt)  # positions fed to the decoder so far, finished sequences included
    while True:
        logits = logits.clone()
        rules(logits, seqs)
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        if options.temperature == 0:
            nxt = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(logits.float() / options.temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        for k in range(n):
            if done[k]:
                nxt[k] = eot
                continue
            t = int(nxt[k])
            sums[k] += float(logprobs[k, t])
            seqs[k].append(t)
            done[k] = t == eot
        length += 1
        if all(done) or length >= max_len:  # (not len(seqs[0]): a finished first sample stops growing)
            break
        out, cache, _ = net.decoder(nxt[:, None].to(net.device), cache)
        logits = to_host(out[:, -1])
    results = []
    for seq, total in zip(seqs, sums):
        sampled = seq[len(prompt):]
        if sampled and sampled[-1] == eot:
            sampled = sampled[:-1]
        results.append(DecodingResult(sampled, total, total / (len(sampled) + 1), 0.0,
                                      options.temperature))
    results.sort(key=lambda r: _score(r, options.length_penalty), reverse=True)
    return results


def _beam_search(net: Whisper, rules: LogitRules, cache: DecoderCache, logits: Tensor,
                 prompt: list[int], max_len: int, options: DecodingOptions,
                 eot: int) -> list[DecodingResult]:
    beam = options.beam_size
    max_finished = max(1, round(beam * options.patience))
    seqs = [list(prompt)]
    sums = [0.0]
    finished: list[tuple[list[int], float]] = []
    while True:
        logits = logits.clone()
        rules(logits, seqs)
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        top_lp, top_tok = logprobs.topk(beam + 1, dim=-1)
        candidates: list[tuple[float, int, int]] = []
        for k in range(len(seqs)):
            for lp, t in zip(top_lp[k].tolist(), top_tok[k].tolist()):
                candidates.append((sums[k] + lp, k, t))
        candidates.sort(key=lambda c: c[0], reverse=True)
        new_seqs, new_sums, parents, next_tokens = [], [], [], []
        for total, k, t in candidates:
            if t == eot:
                if len(finished) < max_finished:
                    finished.append((seqs[k][len(prompt):], total))
                continue
            new_seqs.append(seqs[k] + [t])
            new_sums.append(total)
            parents.append(k)
            next_tokens.append(t)
            if len(new_seqs) == beam:
                break
        if len(finished) >= max_finished or not new_seqs or len(new_seqs[0]) >= max_len:
            break
        seqs, sums = new_seqs, new_sums
        cache = cache.select(torch.tensor(parents, device=net.device))
        out, cache, _ = net.decoder(torch.tensor(next_tokens, device=net.device)[:, None], cache)
        logits = to_host(out[:, -1])
    if not finished:  # ran out of length: keep the live beams as they are
        finished = [(s[len(prompt):], total) for s, total in zip(new_seqs or seqs, new_sums or sums)]
    results = [DecodingResult(toks, total, total / (len(toks) + 1), 0.0, 0.0) for toks, total in finished]
    results.sort(key=lambda r: _score(r, options.length_penalty), reverse=True)
    return results
