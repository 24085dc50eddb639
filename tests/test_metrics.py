"""Scoring: what counts as an error."""

from susurrus.evaluation.metrics import error_counts, normalize


def test_spoken_digits_are_scored_digit_by_digit():
    assert normalize("SIX NINE EIGHT") == normalize("6, 9, 8.") == "6 9 8"
    assert error_counts("six nine eight", "6 9 7.")[0] == 1


def test_chinese_is_scored_in_one_script():
    # the same words in traditional characters are no error; a different character is one
    assert error_counts("想听歌曲我们好像在哪见过", "想聽歌曲我們好像在哪見過", "zh", "char") == (0, 12)
    assert error_counts("想聽歌曲", "想听歌曲", "zh", "char") == (0, 4)
    assert error_counts("想听歌曲", "想天歌曲", "zh", "char") == (1, 4)
    # other languages are not folded
    assert error_counts("聽", "听", "ja", "char") == (1, 1)
