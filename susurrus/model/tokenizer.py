"""Whisper's tokenizer, read from a model's ``tokenizer.json`` with HF ``tokenizers``.

Special tokens are looked up by name, so English-only and multilingual vocabularies (and
ones with more languages) work alike. Timestamp tokens follow ``<|notimestamps|>``.
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from pathlib import Path

import tokenizers

from susurrus.model.vocabulary import parse_tokenizer

TIME_PRECISION = 0.02  # seconds per timestamp token


@dataclass
class Tokenizer:
    hf: tokenizers.Tokenizer
    multilingual: bool
    language: str | None = None  # None: not chosen yet (to be detected)
    task: str = "transcribe"

    @classmethod
    def from_file(cls, path: str | Path, multilingual: bool, language: str | None = None,
                  task: str = "transcribe") -> Tokenizer:
        return cls.from_json(Path(path).read_text(encoding="utf-8"), multilingual, language, task)

    @classmethod
    def from_json(cls, text: str, multilingual: bool, language: str | None = None,
                  task: str = "transcribe") -> Tokenizer:
        """From a ``tokenizer.json``'s text (``LoadedModel.tokenizer_json``)."""
        return cls(parse_tokenizer(text), multilingual,
                   language if multilingual else "en", task if multilingual else "transcribe")

    def with_options(self, language: str | None, task: str) -> Tokenizer:
        if not self.multilingual:
            return Tokenizer(self.hf, False, "en", "transcribe")
        if language is not None and language not in self.language_codes:
            raise ValueError(f"unknown language {language!r}; known: {', '.join(self.language_codes)}")
        if task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', not {task!r}")
        return Tokenizer(self.hf, True, language, task)

    def _special(self, text: str) -> int:
        token = self.hf.token_to_id(text)
        if token is None:
            raise KeyError(f"tokenizer has no special token {text}")
        return token

    @functools.cached_property
    def eot(self) -> int:
        return self._special("<|endoftext|>")

    @functools.cached_property
    def sot(self) -> int:
        return self._special("<|startoftranscript|>")

    @functools.cached_property
    def transcribe(self) -> int:
        return self._special("<|transcribe|>")

    @functools.cached_property
    def translate(self) -> int:
        return self._special("<|translate|>")

    @functools.cached_property
    def sot_lm(self) -> int:
        return self._special("<|startoflm|>")

    @functools.cached_property
    def sot_prev(self) -> int:
        return self._special("<|startofprev|>")

    @functools.cached_property
    def no_speech(self) -> int:
        for name in ("<|nospeech|>", "<|nocaptions|>"):
            token = self.hf.token_to_id(name)
            if token is not None:
                return token
        raise KeyError("tokenizer has no <|nospeech|> or <|nocaptions|> token")

    @functools.cached_property
    def no_timestamps(self) -> int:
        return self._special("<|notimestamps|>")

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    @functools.cached_property
    def language_codes(self) -> list[str]:
        """Language codes in token order (``<|en|>`` right after ``<|startoftranscript|>``)."""
        codes = []
        for token in range(self.sot + 1, self.translate):
            piece = self.hf.id_to_token(token)
            if piece and piece.startswith("<|") and piece.endswith("|>"):
                codes.append(piece[2:-2])
        return codes

    @functools.cached_property
    def language_tokens(self) -> list[int]:
        return [self.sot + 1 + i for i in range(len(self.language_codes))]

    def language_token(self, code: str) -> int:
        return self._special(f"<|{code}|>")

    @property
    def sot_sequence(self) -> list[int]:
        seq = [self.sot]
        if self.multilingual and self.language is not None:
            seq.append(self.language_token(self.language))
            seq.append(self.transcribe if self.task == "transcribe" else self.translate)
        return seq

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, tokens: list[int]) -> str:
        return self.hf.decode([t for t in tokens if t < self.eot])

    def decode_with_timestamps(self, tokens: list[int]) -> str:
        out: list[str] = []
        run: list[int] = []
        for t in tokens:
            if t >= self.timestamp_begin:
                out.append(self.hf.decode(run))
                run = []
                out.append(f"<|{(t - self.timestamp_begin) * TIME_PRECISION:.2f}|>")
            elif t < self.eot:
                run.append(t)
        out.append(self.hf.decode(run))
        return "".join(out)

    @functools.cached_property
    def non_speech_tokens(self) -> list[int]:
        """Tokens for symbols that are not speech (music notes, brackets, ...), as suppressed by
        the reference implementation, keeping those that also start common words."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        musical = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(musical):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in musical:
                    result.add(tokens[0])
        return sorted(result)

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Group text tokens into words (by leading space or punctuation; by unicode
        character for languages written without spaces)."""
        if self.language in {"zh", "ja", "th", "lo", "my", "yue"}:
            return self._split_on_unicode(tokens)
        subwords, subword_tokens = self._split_on_unicode(tokens)
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for sub, toks in zip(subwords, subword_tokens):
            special = toks[0] >= self.eot
            with_space = sub.startswith(" ")
            punct = sub.strip() in string.punctuation
            if special or with_space or punct or not words:
                words.append(sub)
                word_tokens.append(list(toks))
            else:
                words[-1] += sub
                word_tokens[-1].extend(toks)
        return words, word_tokens

    def _split_on_unicode(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        words: list[str] = []
        word_tokens: list[list[int]] = []
        current: list[int] = []
        for token in tokens:
            current.append(token)
            text = self.decode_with_timestamps(current)
            if "\ufffd" not in text:
                words.append(text)
                word_tokens.append(current)
                current = []
        return words, word_tokens
