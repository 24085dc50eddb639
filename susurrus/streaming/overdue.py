"""Overdue commits: a stream that has committed nothing for too long commits what it has read.

The commit policy waits for evidence that a word is settled: two steps that agree on a window's
opening, a far margin for an unlikely token, attention away from the edge, the next word begun.
On speech the model reads badly (a strong accent, a child, noise, telephone audio) that evidence
may never come: the hypotheses keep changing, their tokens are unlikely, a number's closing
punctuation is read in the silence after the audio, and the stream commits nothing for seconds
while the audio goes by (a user sees nothing, then a burst at the next pause). Waiting longer
does not make such speech easier to read, and a stream's latency is a setting, not a hope.

So once a window has gone :func:`overdue_s` of audio past its last committed word (the
setting's own commit delay, a step's audio and the margin, plus :data:`OVERDUE_AFTER_S`) with
at least :data:`MIN_SPEECH_S` of speech in it, a step that would commit nothing commits the
whole words that it and the last step both decoded and that it read before the commit margin,
going forward through the audio, however unlikely (:func:`overdue_count`; a word's trailing
punctuation does not hold it back, and a decode's last word is whole when the decoder said
end-of-text after it). The agreement of two readings stays: committing whatever
one step guessed cost the adult accented speech of the hard set up to 1.5 WER points (guesses the
next steps would have replaced). When that is nothing, the step decodes again over the window's
audio encoded as offline Whisper encodes it, every frame attending to every other (with the
silence continuation after it, as each step has it: the reading :mod:`opening` checks openings
with), and commits that reading's words the same way, where they agree with the step's own
decode, the last step's or the last such reading's (two readings in both directions a step
apart are two readings of the audio as well: where every step guesses anew, they may be the only
two that agree) (:func:`read_again`). The stream then goes on over its own frames from
those words; the hallucination guards judge them as any others.

Cost, only where a stream is overdue: none for the first; for the second an encoder pass over
the window's frames so far and one greedy decode, at most once per :data:`RETRY_S` of audio.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from susurrus.decoding.decode import LogitRules
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper
from susurrus.streaming.calls import Steps
from susurrus.streaming.commit import has_letters
from susurrus.streaming.config import FRAME_S, StreamConfig
from susurrus.streaming.greedy import StepDecode, decode_step
from susurrus.streaming.opening import read_both_ways
from susurrus.streaming.state import CrossBuffer, WindowState

# a word waits ~chunk + margin for its commit (a step's audio, then the margin); the bench's health
# bar is 3 s beyond that. Overdue 2.5 s past the margin: the words then committed waited at most a
# step more, within the bar with 0.5 s to spare
OVERDUE_AFTER_S = 2.5
MIN_SPEECH_S = 1.0  # a word's worth of speech at least (noise that keeps the gate awake is not read again)
RETRY_S = 0.5  # while still overdue after a reading that committed nothing, read again at most this often


def overdue_s(cfg: StreamConfig) -> float:
    """Seconds of audio after a window's last committed word (its start) after which a step
    that would commit nothing commits what it read (:func:`overdue_count`)."""
    return OVERDUE_AFTER_S + cfg.commit_margin_ms / 1000


def overdue_count(tokens: list[int], frames: list[int], n_real: int, cfg: StreamConfig,
                  starts_word: Callable[[int], bool], piece: Callable[[int], str], committed_end: int,
                  agreed: int | None = None, ended: bool = False) -> int:
    """How many of a decode's ``tokens`` an overdue step commits: those, from the first, that
    attended at least the commit margin before the audio's edge (``n_real`` frames), however
    likely, as long as they go forward through the audio after the last committed word (which
    ends at frame ``committed_end``): none reads more than ``reread_frames`` before it or before
    the token ahead of it (a decoder that guesses on without reading the audio attends anywhere,
    often the window's first frames). Cut back to whole words; a word's closing punctuation
    (often read at the edge, or in the silence after it) goes with it when a new word or the
    decode's end follows. Only the first ``agreed`` tokens may go: what another reading of the
    same audio (the last step's, or the step's own beside a reading again) also decoded.
    ``ended``: the decoder said end-of-text after the decode's last token, so its last word is
    whole too (it was read before the margin: not a word cut by the audio's edge)."""
    limit = len(tokens) if agreed is None else agreed
    edge = n_real - round(cfg.commit_margin_ms / 1000 / FRAME_S)
    floor = committed_end
    n = 0
    while n < limit and floor - cfg.reread_frames <= frames[n] < edge:
        floor = max(floor, frames[n])
        n += 1
    while n > 0:
        end = n
        while end < len(tokens) and not has_letters(piece(tokens[end])):
            end += 1  # the word's closing punctuation goes with it
        if (end == len(tokens) and (end > n or ended)) or (end < len(tokens) and starts_word(tokens[end])):
            return end
        n -= 1
    return 0


def read_again(net: Whisper, tok: Tokenizer, cfg: StreamConfig, win: WindowState, cross: CrossBuffer,
               prompt: list[int], rules: LogitRules, starts_word: Callable[[int], bool], n_real: int,
               running_max: float, silence: int) -> Steps[StepDecode | None]:
    """The window's audio so far encoded in both directions and decoded greedily after the
    prompt and the committed tokens, as a step decodes (``relaxed``: tokens near the edge do not
    stop it), or None when the encoding does not cover the step's ``n_real`` frames. The
    cross-attention positions it writes are put back; the decode's cache is not kept."""
    scratch = dataclasses.replace(win, prefix=None, last_hypothesis=[])
    return (yield from read_both_ways(net, win, cross, n_real, running_max, silence, False,
                                      lambda kv: decode_step(net, tok, cfg, scratch, kv, prompt, rules, starts_word,
                                                             n_real, final=False, relaxed=True)))
