"""``stream -f srt``'s cues follow sentences and a maximum length, as subtitle tools' do: JFK's
one 10.5 s sentence is more than one cue (at its last comma within 7 s, when it has one)."""

from __future__ import annotations

import pytest
from server_helpers import streamed

from susurrus.audio.io import decode_audio
from susurrus.streaming.output import CUE_MAX_S, words_to_segments, write_stream_result

JFK = "jfk_inaugural"


@pytest.mark.slow
def test_a_long_sentence_is_cut_at_a_clause_within_the_longest_cue(tiny, dev_item, tmp_path):
    stream = streamed(tiny, decode_audio(dev_item(JFK).audio), "medium")
    cues = words_to_segments(stream.words)
    assert len(cues) >= 2 and all(c.end - c.start <= CUE_MAX_S for c in cues)
    assert "".join(c.text for c in cues) == "".join(w.word for w in stream.words)  # every word, once
    srt = write_stream_result("srt", stream.words, stream.audio_time, tmp_path / "jfk.srt").read_text()
    assert srt.count(" --> ") == len(cues)
