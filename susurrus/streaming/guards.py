"""The decoder's guards: end-of-text refused while speech remains, the repetition and
re-reading checks that catch a decoding loop or the decoder reading its audio twice, and the
check that it has lost the audio (its continuation reads the silence past it). Pure
functions over tokens, words and frames; ``StreamSession`` and ``greedy.py`` apply them."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch

from susurrus.decoding.alignment import speech_frames
from susurrus.streaming.commit import has_letters


def speech_mask(mel_log10: torch.Tensor, n_real: int) -> np.ndarray:
    """Per encoder frame, whether it is louder than the window's noise floor."""
    per_mel = speech_frames(mel_log10, mel_log10.shape[1])
    n = min(n_real, len(per_mel) // 2)
    return per_mel[: 2 * n].reshape(n, 2).any(axis=1)


def eot_too_early(speech: np.ndarray, last_frame: int, n_real: int, final: bool) -> bool:
    """The end-of-text guard: whether speech remains after ``last_frame`` (the furthest frame a
    token read): half a second of speech beyond half a second past it; at a window's last step
    (nothing after it will read this audio) 0.3 s beyond 0.2 s. ``speech``: :func:`speech_mask`."""
    lead, need = (10, 15) if final else (25, 25)
    return speech[last_frame + lead:n_real].sum() >= need


def starts_over(frame: int, frames: list[int], forced: int, committed_end_frame: int, reread_frames: int,
                says_again: Callable[[], bool]) -> bool:
    """Whether a new word read at ``frame`` is read from audio already transcribed (not past
    ``forced``, where the decoder was when its end-of-text was refused; before this step's
    words, ``frames``: the frames their first tokens were read at; or well before the end of the
    committed ones, saying one of them again: the committed end alone can be late, a word
    stretched to the audio edge): the decoder is starting over. ``says_again``: whether the word
    says a committed one again (:func:`says_again`), asked only when it matters. (A word's later
    tokens are not its place: they complete what its first token began, and where they attend
    says little; a Chinese character's second byte token has attended a second past the speech
    its first was read at.)"""
    return (frame <= forced or frame < max(frames, default=frame) - reread_frames
            or (frame < committed_end_frame - 2 * reread_frames and says_again()))


def says_again(piece: str, committed_text: str) -> bool:
    """Whether ``piece`` (a token's text) is the start of a word of ``committed_text``."""
    piece = piece.strip().lower().strip(".,;:!?\"'")
    committed = committed_text.lower().split()
    return bool(piece) and any(w.strip(".,;:!?\"'").startswith(piece) for w in committed)


def thrice_at_end(seq: Sequence[Hashable], longest: int | None = None) -> int:
    """The length of the shortest phrase of 1..``longest`` items (default: any length) that
    ``seq`` ends with three times back to back, 0 if none. A looped sentence is as much a loop
    as a looped word: Whisper repeats whole sentences ("C'est un peu plus important que l'on a
    fait." thirteen times, base, French), so the phrase is not bounded by a guess of how long a
    loop can be."""
    last = len(seq) - 1
    bound = len(seq) // 3 if longest is None else min(longest, len(seq) // 3)
    for n in range(1, bound + 1):
        # cheap filter first: the phrase's last item at the same place in all three sayings
        if seq[last - n] == seq[last] == seq[last - 2 * n] and seq[-n:] == seq[-2 * n:-n] == seq[-3 * n:-2 * n]:
            return n
    return 0


def repeats_third_time(seq: list[int], longest: int | None = None) -> bool:
    """Whether the tokens ``seq`` end with some phrase three times back to back (:func:`thrice_at_end`)."""
    return thrice_at_end(seq, longest) > 0


# Words read without the attention moving. Whisper's alignment heads follow speech at a few words
# a second; in every decode of tiny.en over the hard and dev sets, and of base over dev and multi
# (2026-12-04, docs/benchmarks_unseen.md), at most 5 words (characters, in Chinese) started within
# 5 frames (0.1 s), except in three recitations of base's: 14-21 words on one frame, a sentence or
# a phrase said over and over ("Ich bin ein bisschen mehr." in German, "C'est un peu plus important
# que l'on a fait." in French, a Japanese phrase). A decoder whose attention rests on one spot for
# STUCK_WORDS words is not reading audio (80 words a second): it recites
STUCK_WORDS = 8
STUCK_FRAMES = 5


def stuck_from(word_frames: list[int], words: int = STUCK_WORDS, span: int = STUCK_FRAMES) -> int | None:
    """Given the frames the words of a decode were read at (their first tokens', in order),
    where a run of the last ``words`` of them began if they all lie within ``span`` frames
    (an index into ``word_frames``), else None."""
    if len(word_frames) < words:
        return None
    last = word_frames[-words:]
    return len(word_frames) - words if max(last) - min(last) <= span else None


_PUNCTUATION = ".,;:!?\"'-…" + "、。，！？；：「」『』（）《》・"  # ... and the CJK scripts' own


def word_key(word: str) -> str:
    """A word compared for repetition: no case, no surrounding punctuation (a Chinese or
    Japanese character with its "、" or "。" is the same word as without)."""
    return word.strip().strip(_PUNCTUATION).lower()


LOOP_WORDS = 64  # the longest phrase the committed-words loop check looks for (a long sentence)

# whether a saying of a repeated phrase was the speaker's, given the indices of the words of the
# saying before it and of its own (``repeats.said_again``)
Heard = Callable[[list[int], list[int]], bool]


def loop_span(before: list[str], new: list[str], longest: int = LOOP_WORDS,
              heard: Heard | None = None) -> tuple[int, int] | None:
    """Where the words ``new`` first complete some 1..``longest``-word phrase said three times
    in a row (words compared without case and punctuation), at any point inside ``new``, not
    only at its end: ``(start, end)``, the third saying's words within ``new`` (``new[start:end]``;
    ``start`` 0 when it began in ``before``), or None. ``heard(prev, last)``: whether a saying
    was the speaker's (given the indices, into ``before + new``, of the words of the saying
    before it and of its own; ``repeats.said_again``): one heard is not a loop, and the search
    goes on past it."""
    index = [i for i, w in enumerate(before) if word_key(w)]
    keys = [word_key(before[i]) for i in index]
    keyed: list[int] = []  # the indices in ``new`` of its words that have a key
    for i, w in enumerate(new):
        key = word_key(w)
        if not key:
            continue
        keys.append(key)
        keyed.append(i)
        index.append(len(before) + i)
        n = thrice_at_end(keys, longest)
        if n and not (heard is not None and heard(index[-2 * n:-n], index[-n:])):
            return (keyed[-n] if len(keyed) >= n else 0), i + 1
    return None


def repeats_thrice(before: list[str], new: list[str], longest: int = LOOP_WORDS) -> bool:
    """Whether the words ``new`` complete, anywhere among them, some 1..``longest``-word phrase
    said three times in a row (:func:`loop_span`)."""
    return loop_span(before, new, longest) is not None


def repeated_tail(words: list[str], limit: int, shortest: int = 3, heard: Heard | None = None) -> int:
    """How many of the last ``limit`` words repeat, at once, the phrase of 3+ words before them
    ("in being comparatively modern, in being comparatively modern"), however many times it was
    said again ("Ich bin ein Schokobombong." twice more, base, over 2.6 s of audio that holds it
    once): 0 if none. ``heard(prev, last)`` (indices into ``words``): a saying the speaker said
    again (:func:`loop_span`) ends the count."""
    norm = [word_key(w) for w in words]
    dropped = 0
    while True:
        rest = norm[:len(norm) - dropped]
        n = next((n for n in range(min(limit - dropped, len(rest) // 2), shortest - 1, -1)
                  if rest[-n:] == rest[-2 * n:-n]), 0)
        end = len(rest)
        if not n or (heard is not None and heard(list(range(end - 2 * n, end - n)), list(range(end - n, end)))):
            return dropped
        dropped += n


def reads_again(committed: list[str], new: list[str]) -> bool:
    """Whether ``new`` opens with words of ``committed`` in their order (its first two, or its
    only one, within the last committed words): text read again, not new speech."""
    norm = [word_key(w) for w in committed]
    head = [word_key(w) for w in new[:2]]
    for i in range(len(norm) - len(head) + 1):
        if norm[i:i + len(head)] == head:
            return True
    return False


def reads_past_audio(pieces: list[str], frames: list[int], n_real: int, ended: bool = False) -> bool:
    """Whether a continuation (its tokens' ``pieces`` and the encoder ``frames`` they attend
    to) reads none of the audio: its first word attends past the ``n_real`` real frames (into
    the silence after them) and nothing after it comes back into the audio; or, ``ended`` (the
    decoder said end-of-text after it), it has no word at all. Said while speech remains after
    the committed text, the decoder has lost its place: the text so far leads it where the
    audio does not go (a wrong first guess it cannot continue, or an end it invents)."""
    first = next((i for i, p in enumerate(pieces) if has_letters(p)), None)
    if first is None:
        return ended
    return all(f >= n_real for f in frames[first:])
