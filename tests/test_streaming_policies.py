"""The streaming engine's policies alone, without a model: the commit policy (commit.py), the
decoder's guards (guards.py), word timing (words.py), the hallucination guard's checks and the
state's print-out. Pure functions over token lists, frames and VAD probabilities."""

from __future__ import annotations

import numpy as np
import torch

from susurrus.streaming.commit import sentences_agreed, stable_count, word_boundary
from susurrus.streaming.config import StreamConfig
from susurrus.streaming.events import StreamWord
from susurrus.streaming.guards import (
    eot_too_early,
    loop_span,
    reads_again,
    repeated_tail,
    repeats_third_time,
    says_again,
    starts_over,
    stuck_from,
    word_key,
)
from susurrus.streaming.hallucination import heard, opening_hallucinated
from susurrus.streaming.overdue import overdue_count
from susurrus.streaming.state import WindowState, brief
from susurrus.streaming.vad import FRAME_MS, VadState
from susurrus.streaming.words import aligned_span, starts_word, token_frames

# a toy vocabulary: token id -> text, as a tokenizer would decode it
VOCAB = {0: " ask", 1: " not", 2: " what", 3: "ever", 4: ".", 5: " Ask", 6: " your", 7: " country", 8: "!"}
EOT = 100


def decode(tokens: list[int]) -> str:
    return "".join(VOCAB[t] for t in tokens if t < EOT)


def starts(token: int) -> bool:
    return starts_word(VOCAB[token], "en")


def test_alignatt_commits_tokens_read_before_the_margin():
    cfg = StreamConfig(commit_margin_ms=500, uncertain_margin_ms=1500, confident_prob=0.5)
    n_real = 200  # 4 s of encoder frames; the margin is 25 frames, the uncertain one 75
    tokens, probs = [0, 1, 2, 6], [0.9, 0.9, 0.9, 0.9]
    assert stable_count(tokens, [10, 100, 176, 190], probs, n_real, cfg, False, [], decode) == 2
    assert stable_count(tokens, [10, 100, 170, 174], probs, n_real, cfg, False, [], decode) == 4
    # an unsure token needs the uncertain margin: it and what follows wait
    assert stable_count(tokens, [10, 100, 170, 174], [0.9, 0.3, 0.3, 0.9], n_real, cfg, False, [], decode) == 2
    # relaxed: one token read past the audio between stable ones is an attention glitch
    assert stable_count(tokens, [10, 230, 100, 190], probs, n_real, cfg, False, [], decode) == 1
    assert stable_count(tokens, [10, 230, 100, 190], probs, n_real, cfg, False, [], decode, relaxed=True) == 3


def test_opening_words_need_agreement_and_the_first_margin():
    cfg = StreamConfig(commit_margin_ms=500, first_margin_ms=1000)
    tokens, frames, probs = [0, 1, 2], [10, 20, 160], [0.9, 0.9, 0.9]
    assert stable_count(tokens, frames, probs, 200, cfg, False, [], decode) == 3
    assert stable_count(tokens, frames, probs, 200, cfg, True, [0, 1, 2], decode) == 2  # 160 is within 1 s
    assert stable_count(tokens, frames, probs, 200, cfg, True, [0, 6], decode) == 1  # the last step said "ask your"
    agreement = StreamConfig(policy="agreement", commit_margin_ms=500)
    assert stable_count(tokens, frames, probs, 200, agreement, False, [0, 1, 6], decode) == 2


def test_translation_commits_whole_sentences_two_steps_agree_on():
    cfg = StreamConfig(task="translate")
    tokens = [0, 1, 4, 5, 6, 7, 8, 2]  # " ask not. Ask your country! what"
    assert sentences_agreed(tokens, tokens, decode) == 7
    assert stable_count(tokens, [0] * 8, [1.0] * 8, 200, cfg, False, tokens, decode) == 7
    assert sentences_agreed(tokens, tokens[:6], decode) == 3  # the second sentence is not agreed yet
    assert sentences_agreed(tokens[:3], tokens[:3], decode) == 0  # nothing after the sentence yet


def test_word_boundary_commits_whole_words():
    tokens = [2, 3, 1]  # " what" "ever" " not"
    assert word_boundary(tokens, 1, False, starts, EOT) == 0  # "ever" continues " what"
    assert word_boundary(tokens, 2, False, starts, EOT) == 2
    assert word_boundary(tokens, 3, False, starts, EOT) == 2  # the last word may go on
    assert word_boundary(tokens, 3, False, starts, EOT, following=0) == 3  # ... unless a new word follows
    assert word_boundary(tokens, 3, False, starts, EOT, following=EOT) == 2
    assert word_boundary(tokens, 1, True, starts, EOT) == 1  # at the end everything goes


def test_unspaced_languages_end_words_at_whole_characters():
    assert starts_word("时", "zh") and not starts_word("\ufffd", "zh")
    assert starts_word(" Haus", "de") and not starts_word("haus", "de")


def test_repetition_guards():
    assert repeats_third_time([5, 1, 2, 1, 2, 1, 2])
    assert not repeats_third_time([5, 1, 2, 1, 2])
    assert repeats_third_time([7, 7, 7], longest=1) and not repeats_third_time([7, 8, 7, 8, 7, 8], longest=1)
    sentence = list(range(100, 114))  # a 14-token sentence (base said one 13 times, French)
    assert repeats_third_time([5] + sentence * 3)
    assert not repeats_third_time([5] + sentence * 2 + sentence[:-1])
    assert not repeats_third_time([5] + sentence * 3, longest=12)  # the bound it had before
    words = " in being comparatively modern, in being comparatively modern.".split(" ")[1:]
    assert repeated_tail(words, 4) == 4
    assert repeated_tail(words, 3) == 0  # only the last 3 words may go: not a whole phrase
    assert repeated_tail(["no,", "no"], 2) == 0  # shorter than 3 words: speech
    said = "Ich bin ein Schokobombong.".split()
    assert repeated_tail(said * 3, 12) == 8  # said twice more: both go
    assert repeated_tail(said * 3, 6) == 4  # only the last 6 words may go: one saying of them
    assert repeated_tail(["Er", "sagt:", *said * 2], 10) == 4


def test_words_read_without_the_attention_moving():
    assert stuck_from([10, 30, 132, 132, 132, 132, 132, 133, 134, 132]) == 2  # the run starts at its 3rd word
    assert stuck_from([132] * 7) is None  # seven: under the bar
    assert stuck_from([10, 15, 20, 25, 30, 35, 40, 45]) is None  # words 5 frames apart: speech
    assert stuck_from([163, 163, 164, 165, 170, 190, 191, 192]) is None  # tiny.en's densest real run


def test_reading_again():
    assert reads_again(["ask", "not", "what", "your"], ["What", "your", "country"])
    assert not reads_again(["ask", "not", "what", "your"], ["country", "can"])
    assert says_again(" Coun", " ask what your country")
    assert not says_again(" .", " ask what your country.")  # punctuation alone says nothing


def test_end_of_text_refused_while_speech_remains():
    speech = np.zeros(200, dtype=bool)
    speech[100:150] = True  # a second of speech from frame 100
    assert eot_too_early(speech, last_frame=50, n_real=200, final=False)
    assert not eot_too_early(speech, last_frame=120, n_real=200, final=False)  # 0.1 s past 0.5 s on
    assert eot_too_early(speech, last_frame=120, n_real=200, final=True)  # at the end 0.3 s past 0.2 s is enough
    assert not eot_too_early(speech, last_frame=140, n_real=200, final=True)


def test_starting_over():
    never = lambda: False  # noqa: E731
    assert starts_over(40, [80, 90], forced=-1, committed_end_frame=0, reread_frames=25, says_again=never)
    assert not starts_over(70, [80, 90], forced=-1, committed_end_frame=0, reread_frames=25, says_again=never)
    assert starts_over(70, [80, 90], forced=75, committed_end_frame=0, reread_frames=25, says_again=never)
    # well before the committed end: only when it says a committed word again
    assert not starts_over(40, [], forced=-1, committed_end_frame=100, reread_frames=25, says_again=never)
    assert starts_over(40, [], forced=-1, committed_end_frame=100, reread_frames=25, says_again=lambda: True)


def test_an_overdue_step_commits_whole_words_read_before_the_margin():
    cfg = StreamConfig(commit_margin_ms=500)  # 25 frames
    piece = VOCAB.__getitem__
    # " ask not what" read at frames 10, 100, 190 of 200: the last is inside the margin
    assert overdue_count([0, 1, 2], [10, 100, 190], 200, cfg, starts, piece, 0) == 2
    # " whatever": "ever" inside the margin holds " what" back (a word is committed whole)
    assert overdue_count([0, 2, 3], [10, 100, 190], 200, cfg, starts, piece, 0) == 1
    # a word's closing punctuation read in the silence after the audio goes with it ...
    assert overdue_count([0, 1, 4], [10, 100, 1499], 200, cfg, starts, piece, 0) == 3
    assert overdue_count([0, 1, 4, 2], [10, 100, 1499, 190], 200, cfg, starts, piece, 0) == 3
    # ... but the decode's last word needs a word or its punctuation after it (it may go on)
    assert overdue_count([0, 1], [10, 100], 200, cfg, starts, piece, 0) == 1
    assert overdue_count([2, 3], [10, 30], 200, cfg, starts, piece, 0) == 0
    # ... or the decoder's end-of-text after it: then it is whole, read before the margin
    assert overdue_count([0, 1], [10, 100], 200, cfg, starts, piece, 0, ended=True) == 2
    assert overdue_count([2, 3], [10, 30], 200, cfg, starts, piece, 0, ended=True) == 2
    assert overdue_count([0, 1], [10, 190], 200, cfg, starts, piece, 0, ended=True) == 1  # " not" at the edge
    # only words read forward through the audio after the last commit (at frame 60 here)
    assert overdue_count([0, 1, 2, 6], [70, 100, 40, 120], 200, cfg, starts, piece, 60) == 2  # " what" read back
    assert overdue_count([0, 1, 2, 6], [70, 100, 80, 120], 200, cfg, starts, piece, 60) == 3  # 0.4 s back: a glitch
    assert overdue_count([0, 1], [10, 100], 200, cfg, starts, piece, 60) == 0  # read before it: a guess
    # only what another reading of the audio also decoded (the last step's hypothesis)
    assert overdue_count([0, 1, 2, 6], [10, 100, 150, 160], 200, cfg, starts, piece, 0, agreed=2) == 2
    assert overdue_count([0, 1, 2, 6], [10, 100, 150, 160], 200, cfg, starts, piece, 0, agreed=0) == 0


def test_word_times_leave_out_tokens_read_past_the_audio():
    n_tok, n_real = 4, 150
    qk = torch.full((2, n_tok, 1500), -5.0)
    for t, peak in enumerate([20, 40, 60]):  # three words read at frames 20, 40, 60 ...
        qk[:, t, peak:peak + 4] = 5.0
    qk[:, 3, 1490:] = 5.0  # ... and a full stop read in the silence past the audio
    qk[:, 3, :n_real] = -2.0  # (its attention spread thin over the audio: it took it all)
    attention = qk.softmax(-1)
    kept, stop = aligned_span(attention, 0, n_real)
    assert kept == [0, 1, 2] and stop == 61 + 25  # up to half a second past the last frame read most (60)
    first, last = token_frames(attention[:, kept], 0, stop)
    assert all(first[t] <= 21 + 20 * t <= last[t] for t in range(3)) and last[2] < stop
    first, last = token_frames(attention, 0, n_real)  # all four over the whole audio: the words collapse
    assert last[1] < 21


def test_token_frames_follow_a_diagonal_attention():
    n_tok, n_frames = 5, 60
    qk = torch.full((2, n_tok, n_frames), 0.01)
    for t in range(n_tok):
        qk[:, t, 10 + 10 * t: 14 + 10 * t] = 1.0  # token t reads frames 10t+10 .. 10t+13
    first, last = token_frames(qk, 4, n_frames)
    assert (np.diff(first) > 0).all() and (last >= first).all()
    assert all(4 + first[t] <= 11 + 10 * t <= 4 + last[t] for t in range(n_tok))  # each token's span holds its peak
    first, last = token_frames(qk, 59, n_frames)  # a single frame: nothing to align
    assert not first.any() and not last.any()


def _vad(probs: list[float]) -> VadState:
    return VadState(frames_done=len(probs), probs=np.array(probs, dtype=np.float32))


def test_hallucination_checks_read_the_vad():
    vad = _vad([0.9] * 30 + [0.01] * 60)  # speech for 0.96 s, then none
    speech_word = StreamWord(" Hello", 0.2, 0.6, 1.0, 0.9)
    late = [StreamWord(" you", 2.0, 2.2, 3.0, 0.5), StreamWord(" all.", 2.3, 2.6, 3.0, 0.5)]
    assert heard([speech_word, *late], vad, 0.15) == 1
    assert heard([speech_word], vad, 0.15) == 1
    assert opening_hallucinated([StreamWord(" Thank you.", 2.0, 2.6, 3.0, 0.5)], vad, 0.15)
    assert not opening_hallucinated([speech_word], vad, 0.15)
    assert opening_hallucinated([StreamWord(" ...", 0.2, 0.6, 1.0, 0.9)], None, 0.15)  # no words at all
    assert FRAME_MS == 32


def test_a_last_word_timed_into_the_silence_is_kept_where_it_was_read_over_speech():
    """A window's last word is often timed late, against the end of the audio after the speech
    (its punctuation is read in the silence that follows); where its tokens were read is the
    evidence it was heard. Read in the silence too, or past the audio, it goes."""
    vad = _vad([0.9] * 30 + [0.01] * 60)  # speech for 0.96 s, then none
    speech_word = StreamWord(" Hello", 0.2, 0.6, 1.0, 0.9)
    late = StreamWord(" you.", 2.5, 2.52, 3.0, 0.99)
    assert heard([speech_word, late], vad, 0.15) == 1  # by its times alone: read in silence
    assert heard([speech_word, late], vad, 0.15, reads=[(0.3, 0.32), (0.9, 0.92)]) == 2
    assert heard([speech_word, late], vad, 0.15, reads=[(0.3, 0.32), (2.4, 2.42)]) == 1
    assert heard([speech_word, late], vad, 0.15, reads=[(0.3, 0.32), None]) == 1
    # read where the attention went back, over audio the words before it were read at (even at
    # their last frame): the decoder reading that audio again, no evidence
    assert heard([speech_word, late], vad, 0.15, reads=[(0.3, 0.62), (0.6, 0.62)]) == 1
    assert heard([speech_word, late], vad, 0.15, reads=[(0.3, 0.62), (0.62, 0.64)]) == 2
    assert heard([late], vad, 0.15, reads=[(0.9, 0.92)], read_after=0.95) == 0  # the committed words' audio
    assert heard([late], vad, 0.15, reads=[(0.9, 0.92)], read_after=0.6) == 1


def test_opening_guard_keeps_words_read_from_speech_whatever_their_times():
    # a window's first 1.2 s are its padding before speech: words whose alignment collapsed onto
    # its first frames lie over non-speech, while their tokens were read from the speech at 1.5 s
    vad = _vad([0.01] * 40 + [0.9] * 50)
    collapsed = [StreamWord(" and", 0.0, 0.02, 3.4, 0.06), StreamWord(" the", 0.02, 0.02, 3.4, 0.06)]
    assert opening_hallucinated(collapsed, vad, 0.15)  # by their times alone: dropped
    assert not opening_hallucinated(collapsed, vad, 0.15, read=(1.5, 1.9))  # read from speech: kept
    assert opening_hallucinated(collapsed, vad, 0.15, read=(0.1, 0.3))  # read from the padding too: dropped
    thanks = [StreamWord(" Thank you.", 0.0, 0.4, 1.0, 0.5)]
    assert opening_hallucinated(thanks, _vad([0.01] * 90), 0.15, read=(1.5, 1.9))  # no speech anywhere


def test_state_prints_shapes_not_contents():
    win = WindowState(start_frame=300, mel=torch.zeros(80, 1200), committed=list(range(50)))
    text = brief(win)
    assert "mel=Tensor[80, 1200]" in text and "committed=[50 items]" in text and len(text) < 250


def test_cjk_punctuation_does_not_hide_a_repetition():
    assert word_key("は、") == word_key("は") == "は"
    assert loop_span(["お", "前", "は、", "お", "前", "は、"], ["お", "前", "は"]) == (0, 3)
