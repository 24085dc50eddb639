"""A speaker's own repetitions are kept, a decoding loop is not (issue 52): the loop guards decide
from where the alignment heads read each saying and whether there is speech there
(``streaming/repeats.py``), not from the text's shape; the items that hold repetitions and what
the bench reports of them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DATA, need_data

from susurrus.audio.io import decode_audio
from susurrus.evaluation.health import longest_repetition, repetition_cell
from susurrus.evaluation.repeats import phrase_cut, quiet
from susurrus.streaming.events import StreamWord
from susurrus.streaming.guards import loop_span, repeated_tail
from susurrus.streaming.repeats import committed_reads, copy_frames, said_again, saying_read

SR = 16000


def test_a_copy_read_over_audio_of_its_own_is_the_speaker_s():
    speech = np.ones(200, dtype=bool)
    one, two = [True], [True, True]  # (which tokens start words)
    assert saying_read([40], [85], one, 0, 200, speech)  # read 45 frames (0.9 s) past the copy before
    assert not saying_read([85], [85], one, 0, 200, speech)  # where the copy before was read: a loop
    assert not saying_read([80], [83], one, 0, 200, speech)  # creeping: under 0.1 s of new audio for a word
    assert not saying_read([40], [210], one, 0, 200, speech)  # read in the silence past the real audio
    assert not saying_read([40, 60], [120, 205], two, 0, 200, speech)  # ... any word of it
    # a word's later token glancing past the audio ("tocke," said five times: its "ke" at frame
    # 1485, in the padding): where the word is read is where its first token is
    assert saying_read([40, 60], [85, 1485], [True, False], 0, 200, speech)
    assert saying_read([40, 1485], [85, 120], [True, False], 0, 200, speech)  # (in the copy before too)
    assert not saying_read([40, 60], [30, 90], two, 0, 200, speech)  # a word went back before its copy's
    assert not saying_read([40, 60], [45, 62], two, 0, 200, speech)  # 0.07 s on a word: not a copy's length
    assert saying_read([40, 60], [60, 90], two, 0, 200, speech)
    # "Lord, Lord, Lord, Lord," (LJSpeech, said four times): the comma is read where the next copy
    # begins; the fourth copy's comma at the frame of the third's: its word moved on, it is heard
    assert saying_read([74, 102], [104, 102], [True, False], 0, 125, speech)
    assert not saying_read([74, 102], [75, 102], [True, False], 0, 125, speech)  # its word did not
    # the copy before committed at an earlier step: read past the committed words' end
    assert saying_read(None, [120], one, 100, 200, speech)
    assert not saying_read(None, [60], one, 100, 200, speech)  # reading committed audio again
    assert not saying_read(None, [100], one, 100, 200, speech)  # at the end of it: nothing new read
    silent = np.zeros(200, dtype=bool)
    assert not saying_read([40], [85], one, 0, 200, silent)  # attention moving forward over no speech
    # a loop creeping forward over a pause (speech up to frame 60, then none): cut; the same copy
    # read where speech returns: kept
    pause = np.zeros(200, dtype=bool)
    pause[:60] = pause[150:] = True
    assert not saying_read([50], [100], one, 0, 200, pause)
    assert saying_read([50], [150], one, 0, 200, pause)
    # a 4-word copy needs 0.1 s of speech a word where it reads: 0.1 s in all is a loop
    short = np.zeros(200, dtype=bool)
    short[100:105] = True
    assert not saying_read([10, 20, 30, 40], [60, 80, 100, 110], [True] * 4, 0, 200, short)
    short[70:120] = True
    assert saying_read([10, 20, 30, 40], [60, 80, 100, 110], [True] * 4, 0, 200, short)


def test_the_copies_frames_this_step_read():
    assert copy_frames([1, 2, 3, 4, 5], 5, 2) == ([2, 3], [4, 5])
    assert copy_frames([1, 2, 3], 3, 2) == (None, [2, 3])  # the copy before began in the forced prefix
    assert copy_frames([7], 1, 2) == (None, [7])


def test_committed_copies_judged_by_where_they_were_read():
    words = ["no,", "no,", "no,", "no."]
    at = [(1.0, 1.1), (1.4, 1.5), (1.8, 1.9), (2.2, 2.3)]  # each read 0.4 s after the one before
    heard = lambda p, q: said_again(at, p, q, None, 0.5)  # noqa: E731
    assert loop_span([], words, heard=heard) is None  # said four times: all kept
    assert loop_span([], words) == (2, 3)  # by the text's shape alone: cut at the third
    same = [(1.0, 1.1), (1.4, 1.5), (1.4, 1.5), (1.4, 1.5)]  # the last two read where the second was
    assert loop_span([], words, heard=lambda p, q: said_again(same, p, q, None, 0.5)) == (2, 3)
    back = [(1.0, 1.1), (1.4, 1.5), (1.2, 1.3), (2.2, 2.3)]  # the third read back before the second
    assert loop_span([], words, heard=lambda p, q: said_again(back, p, q, None, 0.5)) == (2, 3)
    past = [(1.0, 1.1), (1.4, 1.5), None, (2.2, 2.3)]  # the third read only past the audio
    assert loop_span([], words, heard=lambda p, q: said_again(past, p, q, None, 0.5)) == (2, 3)
    said = "Ich bin ein Schokobombong.".split()
    apart = [(t, t + 0.2) for t in (0, .3, .5, .7, 1.5, 1.8, 2.0, 2.3)]
    assert repeated_tail(said * 2, 4, heard=lambda p, q: said_again(apart, p, q, None, 0.5)) == 0
    squeezed = [(t, t + 0.2) for t in (0, .3, .5, .7, .5, .5, .5, .5)]  # read over the first copy's audio
    assert repeated_tail(said * 2, 4, heard=lambda p, q: said_again(squeezed, p, q, None, 0.5)) == 4
    # earlier steps' words by their times, this step's by where they were read
    earlier = [StreamWord(" no,", 1.0, 1.3, 0.0, 0.9), StreamWord(" no,", 1.4, 1.7, 0.0, 0.9)]
    assert committed_reads(earlier, [(1.8, 1.9)]) == [(1.0, 1.3), (1.4, 1.7), (1.8, 1.9)]


def test_committed_copies_need_the_vad_s_speech(dev_item):
    """The VAD's evidence, on real audio (JFK's first 4 s, speech at about 0.6-1.8 s, then 2 s of
    digital silence): a copy is kept where the VAD hears its audio, cut where that is silence."""
    from susurrus.streaming.vad import VadState, load_vad, push_vad

    state = VadState()
    speech = decode_audio(str(dev_item("jfk_inaugural").audio))[:SR * 4]
    push_vad(load_vad(), state, np.concatenate([speech, np.zeros(SR * 2, np.float32)]), final=True)
    assert said_again([(0.5, 0.7), (0.8, 1.0), (1.2, 1.4)], [1], [2], state, 0.5)
    assert not said_again([(0.5, 0.7), (0.8, 1.0), (5.0, 5.2)], [1], [2], state, 0.5)  # read over the silence


def test_the_bench_reports_repeats_kept_and_loops():
    assert repetition_cell([(3, 3), (2, 5), (4, 4), (3, 1), (1, 1)]) == "4 (5; 2/3; 1)"
    assert repetition_cell([]) == "-"


def test_phrase_cut_at_the_gaps_around_it():
    from susurrus.types import Word

    words = [Word(0.5, 0.9, " two", 0.9), Word(1.1, 1.5, " six", 0.9), Word(1.6, 1.7, " a", 0.9)]
    assert phrase_cut(words, 2.0, 0) == (0.4, 1.0, "two")
    assert phrase_cut(words, 2.0, 1) == pytest.approx((1.0, 1.55, "six"))  # "a" (0.1 s) never stands alone


@pytest.mark.slow
def test_a_digit_string_said_three_times_keeps_its_three_sayings(tiny):
    """"two six four eight" (a Mandarin L1 child, hard/) said three times with half a second of
    its own background between: the stream, whose token guard cut any phrase a third time in a
    row, wrote "2 6 4 8. 2 6 4 8. 2 6 4"; now it keeps all three. (Offline greedy, at
    this engine's version, ends its decode after the second copy: " 2 6 4 8 2 6 4 8" over 0.5-7.7 s
    of the 9.9 s; the audio holds three copies, by construction.)"""
    need_data("hard")
    audio = decode_audio(str(DATA / "hard" / "audio" / "speechocean762_000030040.wav"))
    gap = quiet(audio, 0.5)
    joined = np.concatenate([quiet(audio, 0.3)] + [np.concatenate([audio, gap])] * 3)
    # as the item `evaluation/repeats.py` writes (16-bit PCM)
    joined = (np.clip(joined, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768
    stream = tiny.stream()
    block = stream.config.chunk_ms * 16  # as the bench feeds it
    for i in range(0, len(joined), block):
        stream.feed(joined[i:i + block])
    stream.finish()
    assert longest_repetition([w.word for w in stream.words]) == 3, stream.text
    assert len(stream.words) == 12, stream.text  # nothing else said
