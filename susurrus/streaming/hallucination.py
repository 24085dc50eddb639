"""A guard against Whisper's hallucinations on non-speech.

On silence, noise or music Whisper tends to write what its training subtitles had there:
"Thank you.", "Thanks for watching!", subtitle credits ("Subtitles by the Amara.org
community"), "Please subscribe", a lone "you", music notes. :func:`hallucination_verdict`
decides whether a committed candidate should be dropped, from its text and the evidence that
its span holds speech: the fraction of VAD frames over the span that are speech
(:func:`susurrus.streaming.vad.speech_fraction`) and, when the decoder has one, Whisper's
no-speech probability.

It never drops text over speech. A candidate is dropped only when

1. the VAD says the span is mostly non-speech (speech fraction below ``min_speech_fraction``,
   0.2 by default), whatever the text; or
2. the text is, once normalised, exactly a known hallucination phrase (or a repetition of
   them) and the speech evidence is weak: speech fraction below ``weak_speech_fraction``
   (0.5), or, without a VAD, a no-speech probability of at least ``no_speech_threshold``; or
3. the text holds no word at all, only non-verbal markup such as "♪", "[Music]",
   "(upbeat music)", "[BLANK_AUDIO]" (no words, so dropping it never loses speech).

A genuine "Thank you." said over speech-like audio therefore stays.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from susurrus.streaming.events import StreamWord
from susurrus.streaming.vad import VadState, speech_fraction

# Phrases Whisper writes on non-speech, normalised as by :func:`normalize_phrase` (lower case,
# no punctuation, single spaces). YouTube outros and subtitle credits dominate.
HALLUCINATION_PHRASES: frozenset[str] = frozenset({
    # English
    "you", "thank you", "thank you very much", "thank you so much", "thanks", "thank you all",
    "thanks for watching", "thank you for watching", "thank you so much for watching",
    "thank you for watching and see you next time", "thanks for watching see you next time",
    "thank you for listening", "thanks for listening", "thank you for your attention",
    "please subscribe", "please subscribe to my channel", "subscribe to my channel",
    "dont forget to subscribe", "like and subscribe", "please like and subscribe",
    "please like comment and subscribe", "subscribe", "see you next time", "see you in the next video",
    "see you in the next one", "ill see you in the next video", "see you", "bye", "bye bye",
    "goodbye", "okay", "oh", "so", "hmm", "um", "uh", "ah", "the end", "im sorry", "silence",
    "subtitles by the amaraorg community", "subtitles by amaraorg", "transcribed by esoteric",
    "transcription by castingwords", "transcript by castingwords", "subtitles by",
    "captions by", "english subtitles", "subtitles made by the community of amaraorg",
    "translated by", "music", "applause", "laughter", "blank audio", "no audio", "inaudible",
    # Other languages Whisper outputs on silence (multilingual checkpoints)
    "sous titres réalisés par la communauté damaraorg", "soustitres réalisés par la communauté damaraorg",
    "sous titrage st 501", "merci", "merci davoir regardé",
    "untertitel der amaraorg community", "untertitel im auftrag des zdf 2017",
    "untertitel im auftrag des zdf für funk 2017", "vielen dank", "danke", "danke fürs zuschauen",
    "subtítulos realizados por la comunidad de amaraorg", "gracias", "gracias por ver",
    "gracias por ver el video", "sottotitoli creati dalla comunità amaraorg", "grazie",
    "obrigado", "legendas pela comunidade amaraorg", "ondertiteling door de amaraorg gemeenschap",
    "продолжение следует", "спасибо за просмотр", "субтитры сделал dimatorzok",
    "ご視聴ありがとうございました", "ありがとうございました",
    "字幕由amaraorg社区提供", "请不吝点赞 订阅 转发 打赏支持明镜与点点栏目", "谢谢观看",
    "시청해주셔서 감사합니다",
})

_MARKUP = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|<[^>]*>")
_MUSIC = re.compile(r"[♪♫♬♩🎵🎶]")


def normalize_phrase(text: str) -> str:
    """Lower case, accents kept, punctuation (apostrophes and dots included) removed, spaces
    collapsed: "Thanks for watching!" -> "thanks for watching", "Amara.org" -> "amaraorg"."""
    t = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    t = re.sub(r"[.'`´]", "", t)
    t = "".join(c if (c.isalnum() or c.isspace()) else " " for c in t)
    return " ".join(t.split())


def is_non_verbal(text: str) -> bool:
    """No word outside markup: only music notes, bracketed or starred annotations ("[Music]",
    "(upbeat music)", "*laughs*"), punctuation or nothing."""
    t = _MUSIC.sub(" ", _MARKUP.sub(" ", text))
    return not any(c.isalnum() for c in t)


def is_known_hallucination(text: str) -> bool:
    """The text is a known hallucination phrase, or several of them in a row (Whisper repeats
    "Thanks for watching! Thanks for watching!"), after :func:`normalize_phrase`."""
    sentences = [normalize_phrase(s) for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？])", text)]
    sentences = [s for s in sentences if s]
    if not sentences:
        return False
    if all(s in HALLUCINATION_PHRASES for s in sentences):
        return True
    whole = normalize_phrase(text)
    if whole in HALLUCINATION_PHRASES:
        return True
    # "you you you", "thank you thank you": one phrase repeated without punctuation
    words = whole.split()
    for size in range(1, min(6, len(words) // 2) + 1):
        if len(words) % size == 0:
            unit = words[:size]
            if unit * (len(words) // size) == words and " ".join(unit) in HALLUCINATION_PHRASES:
                return True
    return False


@dataclass(frozen=True)
class GuardConfig:
    min_speech_fraction: float = 0.2  # below: the span is mostly non-speech, drop any text
    weak_speech_fraction: float = 0.5  # below: too little speech to trust a known phrase
    no_speech_threshold: float = 0.6  # Whisper's own gate, used for known phrases without a VAD


@dataclass(frozen=True)
class Verdict:
    drop: bool
    reason: str  # "" when kept; else "non-speech", "known-phrase" or "non-verbal"


def hallucination_verdict(text: str, speech_fraction: float | None = None, no_speech_prob: float | None = None,
                          config: GuardConfig = GuardConfig()) -> Verdict:
    """Whether to drop a committed candidate ``text``.

    ``speech_fraction``: fraction of the VAD frames over the candidate's span (best padded by
    ~100 ms each side) at or above the speech threshold; None without a VAD.
    ``no_speech_prob``: Whisper's no-speech probability for the window, if available."""
    if is_non_verbal(text):
        return Verdict(bool(text.strip()), "non-verbal" if text.strip() else "")
    if speech_fraction is not None and speech_fraction < config.min_speech_fraction:
        return Verdict(True, "non-speech")
    if is_known_hallucination(text):
        if speech_fraction is not None:
            weak = speech_fraction < config.weak_speech_fraction
        else:
            weak = no_speech_prob is not None and no_speech_prob >= config.no_speech_threshold
        if weak:
            return Verdict(True, "known-phrase")
    return Verdict(False, "")


def opening_hallucinated(words: list[StreamWord], vad_state: VadState | None, threshold: float,
                         read: tuple[float, float] | None = None) -> bool:
    """The guard against text without speech, for words that open a window (after a pause:
    where Whisper invents text): punctuation alone, "[Music]" or notes, words over audio the
    VAD (``vad_state``; None without one) calls mostly non-speech (under 20 % of the frames
    within 300 ms at ``threshold``), and the phrases Whisper invents over noise ("Thank you.",
    subtitle credits) over weak speech. Words inside a window are never judged: their times
    can be off by a few hundred ms at a pause, and real speech must not be dropped (the VAD
    gating already keeps the decoder off non-speech).

    ``read``: the span (s) of the frames the words' tokens attended to when they were decoded.
    Where the alignment is lost (unlikely tokens over speech the model reads badly), the words'
    times collapse onto the window's first frames, its padding before the speech; the speech is
    where they were read. The evidence of speech is the better of the two spans': words are
    judged invented only when neither holds speech."""
    text = "".join(w.word for w in words)
    if not any(c.isalnum() for c in text):
        return True
    fraction = None
    if vad_state is not None:
        spans = [(words[0].start, words[-1].end)] + ([read] if read is not None else [])
        found = [speech_fraction(vad_state, a * 1000, b * 1000, threshold=threshold, pad_ms=300) for a, b in spans]
        fraction = max((f for f in found if f is not None), default=None)
    return hallucination_verdict(text, fraction).drop


def heard(words: list[StreamWord], vad_state: VadState, threshold: float,
          reads: list[tuple[float, float] | None] | None = None, read_after: float = 0.0) -> int:
    """How many of ``words`` to keep at a window's end: all but the trailing ones over audio
    the VAD calls non-speech (under 20 % of the frames within 300 ms may be speech).

    ``reads``: per word, the span (s) of the frames its tokens attended to when they were
    decoded (None: none inside the audio). A window's last word is often timed late, squeezed
    against the end of the audio after the speech (its closing punctuation is read in the
    silence that follows); where it was read is the evidence it was heard, as for a window's
    opening words (:func:`opening_hallucinated`): a word goes only when neither its times nor
    where it was read hold speech. A word read where the attention went back, over audio the
    words before it were read at (even at their last frame) or the committed words cover (up
    to ``read_after`` s, the last one's end), may be the decoder reading that audio again ("I'm
    not only one here, but only one here.", the second " here" read at the frame of the
    first): where it was read is then no evidence."""
    latest = [read_after]  # latest[k]: where the words before word k were read up to
    for read in (reads or [])[:-1]:
        latest.append(max(latest[-1], read[1]) if read is not None else latest[-1])
    keep = len(words)
    while keep > 0:
        w = words[keep - 1]
        read = reads[keep - 1] if reads is not None else None
        spans = [(w.start, w.end)]
        if read is not None and read[0] >= latest[keep - 1] - 1e-6:  # read past every frame they were read at
            spans.append(read)
        found = [speech_fraction(vad_state, a * 1000, b * 1000, threshold=threshold, pad_ms=300) for a, b in spans]
        if any(f is None or f >= 0.2 for f in found):
            break
        keep -= 1
    return keep
