"""Which repeat is the speaker's and which is a decoding loop, decided from the audio (issue 52).

A phrase said a third time in a row (or more) is either the speaker's ("no no no", "0 0 0", a
digit string said again, counting, a stammer) or the decoder looping (it reads audio it has
already read, or none, and writes the text again because the text so far leads it there). The
text's shape cannot tell them apart; the audio can: a repeat the speaker said has audio of its
own under each copy, which the alignment heads read in order, past the copy before, over
speech, inside the audio heard. Text the audio does not support is the loop and is cut, as
before, by the caller (``greedy.py`` in the decoder, ``session.py`` over committed words).

Two views of the same rule:

* :func:`saying_read`: in the decoder, over the encoder frames each token was read at (the
  alignment heads' most-read frame when the token was predicted) and the window's energy
  speech mask (``guards.speech_mask``);
* :func:`said_again`: over committed words, where each was read (its tokens' frames, as stream
  seconds) or, for a word committed at an earlier step, its time, with the VAD's speech.

The thresholds come from how fast speech goes, not from any item:

* ``REPEAT_WORD_FRAMES``: a word said again takes at least 0.1 s of audio of its own (no one
  says ten words a second; Whisper's alignment heads, reading speech, start under 5 words within
  0.1 s in every decode of tiny.en over hard/ and dev/, ``guards.STUCK_WORDS``). So the copy's
  reading must reach at least that much per word past the copy before, and the audio between
  must hold at least that much speech per word. A loop whose attention creeps forward over
  non-speech (a pause, the background after the speech) reads no speech there and is cut; one
  whose attention rests (the repeated query finding the same audio best) does not advance and is
  cut; one that reads the silence after the real audio is outside it and is cut.
* ``REPEAT_SLACK_FRAMES``: a word's first token is often read a frame or two before the end of
  the word before it (the query predicting a word looks at that word's onset, which can sit
  inside the previous word's last frames); that much looking back is not reading the copy again.
"""

from __future__ import annotations

import numpy as np

from susurrus.streaming.config import FRAME_S
from susurrus.streaming.events import StreamWord
from susurrus.streaming.hallucination import GuardConfig
from susurrus.streaming.vad import VadState, speech_fraction

REPEAT_WORD_FRAMES = 5  # 0.1 s per word (see above)
REPEAT_SLACK_FRAMES = 2  # 40 ms
REPEAT_WORD_S = REPEAT_WORD_FRAMES * FRAME_S
# of the VAD frames within 300 ms of a copy: the hallucination guard's bar for a span's speech
REPEAT_SPEECH = GuardConfig().min_speech_fraction


def copy_frames(frames: list[int], n_decoded: int, n: int) -> tuple[list[int] | None, list[int]]:
    """The frames the last two copies of an ``n``-token phrase were read at, given the frames
    of this step's ``n_decoded`` tokens (the last copy's end among them): (the copy before, or
    None when any of it is in the forced prefix, whose frames this step did not read; the
    last copy's, those of its tokens this step read)."""
    last = frames[max(0, n_decoded - n):n_decoded]
    before = frames[n_decoded - 2 * n:n_decoded - n] if n_decoded >= 2 * n else None
    return before, last


def saying_read(before: list[int] | None, last: list[int], starts: list[bool], committed_end: int, n_real: int,
                speech: np.ndarray) -> bool:
    """Whether the last copy of a phrase said a third time in a row (or more) was read from
    audio of its own: the speaker's repeat, not a decoding loop.

    ``before``: the frames the copy before it was read at (None: committed at an earlier step,
    or the window's prompt; then the committed words' end, ``committed_end``, stands for it);
    ``last``: the frames of the last copy's tokens this step read; ``starts``: per token of the
    phrase, whether it starts a word (its words: at least 1); ``speech``:
    :func:`guards.speech_mask` (per frame, whether it is louder than the window's noise floor).
    Read when

    * each of its words was read in the real audio (before ``n_real``; its first token: a
      word's later tokens can glance past it), not in the silence after it;
    * it moves on from the copy before, word by word: each of its words (its first token; a
      word's later tokens and punctuation complete what its first began and are often read at
      the boundary with the next copy) is read no earlier than the same word of the copy before,
      and on average ``REPEAT_WORD_FRAMES`` per word of the phrase later (a copy is at least that
      long); the copy before committed: it reads past the committed words' end;
    * the audio it claims (from past the copy before to ``REPEAT_WORD_FRAMES`` after its furthest
      frame, where its last word sounds) holds speech, ``REPEAT_WORD_FRAMES`` frames per word."""
    if not last:
        return False
    starts_last = starts[len(starts) - len(last):]  # (``last`` may be the copy's end only)
    placed = [k for k, s in enumerate(starts_last) if s] or list(range(len(last)))  # its words' first tokens
    if any(last[k] >= n_real for k in placed):
        return False  # a word of it read in the silence after the audio
    words = max(1, sum(starts))
    inside = [f for f in last if f < n_real]  # (a word's later token can glance past the audio)
    far = max(inside)
    if before and len(before) == len(last):
        shifts = [last[k] - before[k] for k in placed if before[k] < n_real]
        if shifts and min(shifts) < -REPEAT_SLACK_FRAMES:
            return False  # a word of it went back before the same word of the copy before: read again
        if not shifts or sum(shifts) < REPEAT_WORD_FRAMES * words * len(shifts):
            return False  # resting where the copy before was read, or creeping: no new audio
        near = max(f for f in before if f < n_real)
    else:
        near = committed_end - 1
        if min(inside) < committed_end - REPEAT_SLACK_FRAMES or far <= committed_end:
            return False  # reading committed audio again
    claimed = speech[max(near + 1, min(inside)):far + REPEAT_WORD_FRAMES]
    return int(claimed.sum()) >= REPEAT_WORD_FRAMES * words


# per committed word, where it was read: (start, end) s of stream audio, None when it was read
# only in the silence past the audio (no evidence of its own)
Reads = list[tuple[float, float] | None]


def said_again(reads: Reads, before: list[int], last: list[int], vad_state: VadState | None,
               threshold: float) -> bool:
    """Whether the committed words ``last``, a phrase said again right after the words ``before``
    (indices into ``reads``: per word, where it was read, s: the span of the frames its tokens
    attended to, or the times of a word committed at an earlier step), are the speaker's repeat
    and not a loop: each of its words read inside the audio; it opens no earlier than every
    word of the copy before opened (a loop reads that audio again) and at least
    ``REPEAT_WORD_S`` per word after the copy before opened (audio of its own); and the VAD
    (``vad_state``, at ``threshold``; without one, where it was read decides) finds speech
    there (at least ``REPEAT_SPEECH`` of its frames within 300 ms of the copy's read span).
    Not the words' ends: a word's end is snapped to the end of its run of speech, which a short
    pause between two copies need not break; nor their times alone: the times of a word said
    again are often squeezed to an instant, by the speaker or by a loop."""
    spans = [reads[i] for i in last]
    if any(s is None for s in spans):
        return False
    opens = [reads[i][0] for i in before if reads[i] is not None]
    a = spans[0][0]
    if not opens or a < max(opens) - REPEAT_SLACK_FRAMES * FRAME_S or a < opens[0] + REPEAT_WORD_S * len(last):
        return False
    if vad_state is None:
        return True
    b = max(a + REPEAT_WORD_S * len(last), max(s[1] for s in spans))
    fraction = speech_fraction(vad_state, a * 1000, b * 1000, threshold=threshold, pad_ms=300)
    return fraction is None or fraction >= REPEAT_SPEECH


def committed_reads(earlier: list[StreamWord], step: Reads) -> Reads:
    """The evidence :func:`said_again` reads for the words ``earlier`` (committed at earlier
    steps: their times, all that is kept of them) followed by this step's words, whose ``step``
    reads (:func:`~susurrus.streaming.words.read_span` of each word's tokens) are where they were
    read."""
    return [(w.start, w.end) for w in earlier] + list(step)
