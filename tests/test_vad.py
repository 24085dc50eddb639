"""Voice activity (Silero VAD), speech turns, text-aware end of turn and the hallucination guard,
on real recorded speech and deterministic non-speech signals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from susurrus.audio.io import decode_audio
from susurrus.evaluation import signals
from susurrus.evaluation.degrade import whisperize
from susurrus.streaming.hallucination import (
    hallucination_verdict,
    is_known_hallucination,
    is_non_verbal,
)
from susurrus.streaming.vad import (
    FRAME_MS,
    FRAME_SAMPLES,
    SEQUENCE_CALL_FRAMES,
    VAD_GAINS,
    SileroVad,
    SpeechStarted,
    SpeechStopped,
    TurnConfig,
    TurnState,
    VadState,
    finish_turn,
    frame_inputs,
    fresh_rnn,
    is_speech_padded,
    live_rows,
    load_vad,
    push_turn,
    push_vad,
    push_vad_steps,
    silero_model_path,
    speech_fraction,
    text_turn_silence_ms,
    vad_probs,
)


@pytest.fixture(scope="module")
def vad():
    return load_vad()


def run(vad, audio: np.ndarray, state: VadState | None = None, final: bool = True) -> np.ndarray:
    return push_vad(vad, state if state is not None else VadState(), audio, final=final)


def in_pieces(vad, audio: np.ndarray, size: int = 777) -> np.ndarray:
    """:func:`run` with the audio fed in pieces of ``size`` samples (then the end)."""
    state = VadState()
    parts = [push_vad(vad, state, audio[i:i + size]) for i in range(0, len(audio), size)]
    return np.concatenate([*parts, push_vad(vad, state, np.zeros(0, np.float32), final=True)])


@pytest.fixture(scope="module")
def two_utterances(longform_items):
    """The first two utterances of the LJSpeech long-form stream (tight boundaries, 0.4 s pause
    between them), with 1.5 s of digital silence inserted between them."""
    item = next((i for i in longform_items if i.id.startswith("dev_ljspeech")), None)
    if item is None:
        pytest.skip("the LJSpeech long-form stream is not in the manifest")
    segs = item.segments[:2]
    audio = decode_audio(str(item.audio))[: int((segs[1]["end_s"] + 0.3) * 16000)]
    return signals.insert_gaps(audio, segs, 1.5)


def test_model_ships_in_package():
    path = silero_model_path()
    assert path.exists() and path.suffix == ".onnx"
    assert "site-packages" in str(path) or "silero_vad" in str(path)


def test_vad_same_probabilities_however_chunked(vad, dev_item):
    audio = decode_audio(str(dev_item("jfk_inaugural").audio))[: 6 * 16000]
    whole = run(vad, audio)
    rng = np.random.default_rng(0)
    state, parts, i = VadState(), [], 0
    while i < len(audio):
        k = int(rng.choice([0, 1, 7, 511, 512, 513, 1600, 5120]))
        parts.append(push_vad(vad, state, audio[i:i + k]))
        i += k
    parts.append(push_vad(vad, state, np.zeros(0, np.float32), final=True))
    pieces = np.concatenate(parts)
    assert len(whole) == len(pieces) == -(-len(audio) // FRAME_SAMPLES)
    np.testing.assert_allclose(pieces, whole, atol=1e-6)
    assert state.frames_done == len(whole) and len(state.remainder) == 0


def test_quiet_speech_is_heard_as_loud_speech_is(vad, dev_item):
    """Speech peaking at -60 dBFS (Whisper still reads it): Silero alone hears no speech in it;
    the VAD's input gain makes it hear what it hears in the same speech at full level, the same
    however the stream is cut."""
    audio = decode_audio(str(dev_item("jfk_inaugural").audio))[: 8 * 16000]
    loud = run(vad, signals.at_peak(audio, -3)) >= 0.5
    quiet_audio = signals.at_peak(audio, -60)
    raw, _ = vad.frames(frame_inputs(VadState(), quiet_audio, final=True)[0], VadState().rnn)
    assert loud.mean() > 0.5 and (raw >= 0.5).mean() < 0.05  # Silero alone: deaf to it
    quiet = run(vad, quiet_audio)
    assert ((quiet >= 0.5) == loud).mean() >= 0.9
    np.testing.assert_allclose(in_pieces(vad, quiet_audio), quiet, atol=1e-6)


def test_the_amplified_readings_leave_loud_streams_and_silence_alone(vad, dev_item):
    audio = decode_audio(str(dev_item("jfk_inaugural").audio))[: 2 * 16000]
    state = VadState()
    push_vad(vad, state, signals.at_peak(audio, -3))
    assert state.gained == {}  # a stream that has peaked at -12 dBFS or above: one reading
    assert live_rows(state, frame_inputs(state, signals.at_peak(audio, -50))[0]) == []
    state = VadState()
    push_vad(vad, state, signals.at_peak(audio, -20))
    assert sorted(state.gained) == [0]  # x4 keeps a -20 dBFS peak within full scale, x16 does not
    assert (run(vad, np.zeros(16000, np.float32)) < 0.05).all()  # digital silence: never amplified
    hiss = frame_inputs(VadState(), signals.white_noise(1.0, level_dbfs=-120.0))[0]
    assert [k for k, _ in live_rows(VadState(), hiss)] == [1, 2] and max(VAD_GAINS) == 64.0  # 36 dB at most,
    # and two amplified readings at once: the loudest two


def test_speech_in_noise_is_heard_at_any_recording_level(vad, hard_items):
    """Speech in as much noise (0 dB SNR, a real recording): Silero hears it at the recording's
    own peak (-6 dBFS) and hardly at all at -20 or -30 dBFS, a recording level as ordinary; read
    amplified by a fixed gain besides, the VAD hears it as at full level, however the stream is
    cut."""
    item = next((i for i in hard_items if i.id == "noizeus_sp17_airport_0dB"), None)
    if item is None:
        pytest.skip("hard item noizeus_sp17_airport_0dB not in the manifest")
    audio = decode_audio(str(item.audio))
    loud = (run(vad, signals.at_peak(audio, -6)) >= 0.5).mean()
    assert loud > 0.5
    for peak in (-20, -30, -45):
        x = signals.at_peak(audio, peak)
        alone, _ = vad.frames(frame_inputs(VadState(), x, final=True)[0], VadState().rnn)
        assert (alone >= 0.5).mean() < 0.25, peak  # Silero alone, at the level it is given
        heard = run(vad, x)
        assert abs((heard >= 0.5).mean() - loud) <= 0.1, peak
        assert (heard >= alone - 1e-6).all()  # never less likely than the stream's own reading
        np.testing.assert_allclose(in_pieces(vad, x), heard, atol=1e-6)


def test_a_whisper_after_an_amplified_lead_in_is_heard_at_its_own_level(vad, dev_item):
    """Silero's state follows the level it hears: one fed a lead-in amplified 40 dB heard the
    whispered speech after it (read as it is once the stream peaked) as far less likely
    speech. The amplified reading is a second state; the stream's own is as without it."""
    audio = whisperize(decode_audio(str(dev_item("jfk_inaugural").audio)))[: 8 * 16000]
    probs = run(vad, audio)
    alone, _ = vad.frames(frame_inputs(VadState(), audio, final=True)[0], VadState().rnn)
    assert (probs >= alone - 1e-6).all()  # never less likely than the stream's own reading
    late = slice(len(probs) // 4, None)  # long after the stream peaked: one reading
    np.testing.assert_array_equal(probs[late], alone[late])


def test_sequence_model_is_the_per_frame_model(vad, dev_items):
    """The sequence export (a stream's frames in one call) gives the per-frame model's
    probabilities and recurrent state bit for bit: on real speech at its own level and amplified
    as the VAD reads quiet streams, in calls of different lengths, from states mid-stream."""
    if vad.sequence is None:
        pytest.skip("this silero-vad has no sequence export (>= 6.2.3 ships it)")
    per_frame = SileroVad(sequence=False)
    assert per_frame.sequence is None
    for k, item in enumerate(dev_items[:4]):
        inputs = frame_inputs(VadState(), decode_audio(str(item.audio))[: 5 * 16000])[0]
        for gain in (1.0, *VAD_GAINS):
            x = inputs * np.float32(gain)
            want, want_rnn = per_frame.frames(x, fresh_rnn())
            got, rnn, at = [], fresh_rnn(), 0
            for size in (1, 7, 20, 3 + 11 * k, len(x)):  # calls of different lengths, one state along them
                probs, rnn = vad.frames(x[at:at + size], rnn)
                got.append(probs)
                at += size
            assert at >= len(x) and (want > 0.5).any()
            np.testing.assert_array_equal(np.concatenate(got), want)
            np.testing.assert_array_equal(rnn, want_rnn)
    longer = np.tile(inputs, (-(-(SEQUENCE_CALL_FRAMES + 100) // len(inputs)), 1))  # more than one call's frames
    for a, b in zip(vad.frames(longer, fresh_rnn()), per_frame.frames(longer, fresh_rnn())):  # probabilities, state
        np.testing.assert_array_equal(a, b)
    empty, same = vad.frames(np.zeros((0, 576), np.float32), fresh_rnn())
    assert len(empty) == 0 and same.shape == (2, 1, 128)


@pytest.mark.parametrize("sequence", [True, False], ids=["sequence", "per-frame"])
def test_vad_frames_of_many_streams_together_are_each_streams_own(sequence, dev_items):
    """Many streams' frames in one batch (a Lockstep round): every stream's probabilities and
    recurrent state bit-identical to its own, with streams of different lengths and states;
    with the sequence export and with the per-frame model's batch per frame index."""
    vad = SileroVad(sequence=sequence)
    if sequence and vad.sequence is None:
        pytest.skip("this silero-vad has no sequence export (>= 6.2.3 ships it)")
    audios = [decode_audio(str(item.audio))[: int(16000 * (1.0 + 0.37 * k))] for k, item in enumerate(dev_items[:6])]
    states = [VadState() for _ in audios]
    for state, audio in zip(states, audios):  # different recurrent states to start from
        push_vad(vad, state, audio[:4000 + 700 * len(state.probs)])
    rows = [(frame_inputs(state, audio[4000:])[0], state.rnn) for state, audio in zip(states, audios)]
    together = vad.frames_together(rows)
    assert len({len(inputs) for inputs, _ in rows}) == len(rows)
    for (inputs, rnn), (probs, new_rnn) in zip(rows, together):
        own_probs, own_rnn = vad.frames(inputs, rnn)
        assert len(probs) == len(inputs) and (own_probs > 0.5).any()
        np.testing.assert_array_equal(probs, own_probs)
        np.testing.assert_array_equal(new_rnn, own_rnn)


def test_streams_read_at_different_gains_together_are_each_streams_own(vad, dev_item):
    """A round of streams at different levels (read once, twice, three times) run as one
    model pass (``calls.run_together``): each stream gets its own readings' probabilities, and
    they are those it gets alone."""
    from susurrus.streaming.calls import Packing, run_together

    audio = decode_audio(str(dev_item("jfk_inaugural").audio))[: 3 * 16000]
    streams = [signals.at_peak(audio, peak) for peak in (-3, -20, -30, -50, -20)]
    alone_states, together_states = [VadState() for _ in streams], [VadState() for _ in streams]
    no_split = Packing((), frozenset(), frozenset())  # VAD calls only: no network to look at
    for lo, hi in ((0, 9000), (9000, 30000), (30000, len(audio))):
        want = [push_vad(vad, st, x[lo:hi]) for st, x in zip(alone_states, streams)]
        steps = [push_vad_steps(vad, st, x[lo:hi]) for st, x in zip(together_states, streams)]
        calls = [next(g) for g in steps]
        if lo == 30000:  # by then each stream has peaked: itself, then one or two gains
            assert [len(c.rows) for c in calls] == [1, 2, 3, 3, 2]
        for g, result, own in zip(steps, run_together(None, calls, no_split), want):
            with pytest.raises(StopIteration) as stop:
                g.send(result)
            np.testing.assert_array_equal(stop.value.value, own)


def test_vad_steps_yield_the_frames_push_vad_runs(vad, dev_item):
    audio = decode_audio(str(dev_item("jfk_inaugural").audio))[: 3 * 16000]
    state, steps_state = VadState(), VadState()
    for piece in (audio[:300], audio[300:20000], audio[20000:]):
        want = push_vad(vad, state, piece)
        steps = push_vad_steps(vad, steps_state, piece)
        try:
            call = next(steps)  # no whole frame: nothing to run, the generator ends at once
        except StopIteration as stop:
            assert len(want) == 0 and len(stop.value) == 0
        else:
            with pytest.raises(StopIteration) as stop:  # one call: the frames and their amplified readings
                steps.send(vad.run(call.rows))
            np.testing.assert_array_equal(stop.value.value, want)
        assert steps_state.frames_done == state.frames_done
        np.testing.assert_array_equal(steps_state.probs, state.probs)
        np.testing.assert_array_equal(steps_state.remainder, state.remainder)


def test_vad_history_is_bounded(vad):
    state = VadState(history_frames=40)
    x = signals.white_noise(5.0, level_dbfs=-40.0, seed=3)
    out = np.concatenate([push_vad(vad, state, x[i:i + 3000]) for i in range(0, len(x), 3000)])
    assert state.frames_done == len(out) == len(x) // FRAME_SAMPLES
    assert 40 <= len(state.probs) <= 80
    assert state.probs_start + len(state.probs) == state.frames_done
    f0, recent = vad_probs(state, (state.frames_done - 10) * FRAME_MS, state.frames_done * FRAME_MS)
    np.testing.assert_array_equal(recent, out[-10:])
    assert f0 == state.frames_done - 10
    assert len(vad_probs(state, 0, 100)[1]) == 0  # forgotten
    assert speech_fraction(state, 0, 100) is None
    assert is_speech_padded(state, 0, 100)  # unknown counts as speech (conservative)


@pytest.mark.parametrize("kind", ["silence", "white", "pink", "music"])
def test_vad_says_non_speech_on_synthetic_signals(vad, kind):
    peaks = []
    for seed in range(2):
        probs = run(vad, signals.GENERATORS[kind](4.0, seed=seed))
        peaks.append(float(probs.max()))
    print(f"{kind} at -20 dBFS: max speech probability {max(peaks):.3f}")
    assert max(peaks) < 0.5


def test_vad_on_packaged_chimes(vad):
    """Real non-speech recordings: the two 1 s notification chimes moonshine-voice ships."""
    spec = importlib.util.find_spec("moonshine_voice")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("moonshine-voice (a dev dependency) not installed")
    assets = Path(list(spec.submodule_search_locations)[0]) / "assets"
    for name in ("success.wav", "error.wav"):
        if not (assets / name).exists():
            pytest.skip(f"{name} not in moonshine-voice's assets")
        probs = run(vad, decode_audio(str(assets / name)))
        print(f"{name}: max speech probability {probs.max():.3f}")
        assert probs.max() < 0.5


def test_vad_says_speech_on_real_recording(vad, dev_item):
    item = dev_item("jfk_inaugural")
    state = VadState()
    run(vad, decode_audio(str(item.audio)), state)
    frac = speech_fraction(state, 0, 1000 * item.duration_s)
    assert frac is not None and frac > 0.5
    assert is_speech_padded(state, 0, 1000 * item.duration_s)


def test_turns_around_inserted_gap(vad, two_utterances):
    audio, segs = two_utterances
    probs = run(vad, audio)
    state, events = TurnState(), []
    for i in range(0, len(probs), 7):  # a few frames at a time, as a session would
        events += push_turn(state, probs[i:i + 7])
    events += finish_turn(state)
    kinds = [type(e) for e in events]
    assert kinds == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped], events
    (s0, e0, s1, e1) = events
    starts = [1000 * s["start_s"] for s in segs]
    ends = [1000 * s["end_s"] for s in segs]
    assert abs(s0.speech_start_ms - starts[0]) <= 300 and abs(s1.speech_start_ms - starts[1]) <= 300
    assert abs(e0.speech_end_ms - ends[0]) <= 300 and abs(e1.speech_end_ms - ends[1]) <= 300
    assert s0.audio_start_ms == max(0, s0.speech_start_ms - 300)
    assert s1.audio_start_ms == s1.speech_start_ms - 300
    # OpenAI's audio_end_ms includes the silence that ended the turn (500 ms, in 32 ms frames)
    assert e0.audio_end_ms == e0.speech_end_ms + 16 * FRAME_MS
    assert e0.audio_end_ms < s1.speech_start_ms  # decided inside the gap
    # compute gating: the middle of the gap is not speech, its edges are within padding
    vs = VadState()
    run(vad, audio, vs)
    mid = (ends[0] + starts[1]) / 2
    assert not is_speech_padded(vs, mid - 100, mid + 100)
    assert is_speech_padded(vs, ends[0] + 200, ends[0] + 300)
    assert is_speech_padded(vs, starts[1] - 250, starts[1] - 150)


def test_turn_semantics_on_synthetic_probabilities():
    p = np.array([0.9] * 10 + [0.1] * 15 + [0.8] * 3 + [0.0] * 20, dtype=np.float32)
    state = TurnState()
    ev = push_turn(state, p)
    # a 15-frame (480 ms) pause does not end the turn; 16 frames (512 ms >= 500 ms) do
    assert ev == [SpeechStarted(0, 0), SpeechStopped(28 * 32 + 16 * 32, 28 * 32)]
    # the caller can ask for a shorter silence (e.g. after a finished sentence)
    ev = push_turn(TurnState(), p, silence_duration_ms=250)
    assert [type(e) for e in ev] == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped]
    assert ev[1] == SpeechStopped(10 * 32 + 8 * 32, 10 * 32)
    # the next turn's 300 ms of padding would reach back to 500 ms, into the turn that ended at
    # 576 ms: turns never overlap, so it starts there
    assert ev[2] == SpeechStarted(576, 25 * 32)
    # min_speech_ms: an isolated one-frame blip starts no turn; the onset is still the first frame
    blip = np.array([0.0] * 20 + [0.9] + [0.0] * 20 + [0.9] * 4 + [0.0] * 20, dtype=np.float32)
    assert len(push_turn(TurnState(), blip)) == 4
    ev = push_turn(TurnState(config=TurnConfig(min_speech_ms=96)), blip)
    assert ev[0] == SpeechStarted(41 * 32 - 300, 41 * 32) and len(ev) == 2
    # an open turn is closed at the end of the stream
    st = TurnState()
    assert push_turn(st, np.full(5, 0.9, np.float32)) == [SpeechStarted(0, 0)]
    assert finish_turn(st) == [SpeechStopped(160, 160)]


def test_text_turn_silence():
    assert text_turn_silence_ms("I will be there at noon.") == 350
    assert text_turn_silence_ms("Are you coming?") == 350
    assert text_turn_silence_ms('He said "stop!"') == 350
    # a sentence end the recogniser was unsure of (e.g. a period written for a pause) waits the base
    assert text_turn_silence_ms("I will be there at noon.", end_probability=0.8) == 500
    assert text_turn_silence_ms("I will be there at noon.", end_probability=0.96) == 350
    assert text_turn_silence_ms("I went to the store and") == 1000
    assert text_turn_silence_ms("Let me think, um") == 1000
    assert text_turn_silence_ms("So, um.") == 1000
    assert text_turn_silence_ms("I was going to...") == 1000
    assert text_turn_silence_ms("The options are:") == 1000
    assert text_turn_silence_ms("I went to the store,") == 500  # commas end many turns and clips
    assert text_turn_silence_ms("We met Dr.") == 500
    assert text_turn_silence_ms("I went to the store") == 500
    assert text_turn_silence_ms("") == 500
    assert text_turn_silence_ms("Done.", base_silence_ms=800) == 560


def test_hallucination_phrases():
    for text in ["Thank you.", "Thanks for watching!", "Thanks for watching! Thanks for watching!",
                 "Subtitles by the Amara.org community", "Please subscribe.", " you", "Bye.",
                 "Sous-titres réalisés par la communauté d'Amara.org", "ご視聴ありがとうございました"]:
        assert is_known_hallucination(text), text
        assert hallucination_verdict(text, speech_fraction=0.3).drop, text
        assert hallucination_verdict(text, no_speech_prob=0.8).drop, text
        assert not hallucination_verdict(text, speech_fraction=0.9).drop, text  # said over speech: kept
        assert not hallucination_verdict(text).drop, text  # no evidence: kept
    for text in ["♪", "♪ ♪", "[Music]", "(upbeat music)", "[BLANK_AUDIO]"]:
        assert is_non_verbal(text) and hallucination_verdict(text, speech_fraction=1.0).drop
    for text in ["Thank you for the wonderful dinner.", "I said thank you.", "You know what I mean."]:
        assert not is_known_hallucination(text)
        assert not hallucination_verdict(text, speech_fraction=0.3).drop
    assert hallucination_verdict("anything at all", speech_fraction=0.1).drop  # VAD: no speech there


@pytest.mark.slow
def test_guard_on_noise_and_never_on_real_speech(vad, dev_items, longform_items):
    noise = VadState()
    run(vad, signals.pink_noise(3.0, seed=1), noise)
    frac = speech_fraction(noise, 0, 3000)
    assert hallucination_verdict("Thanks for watching!", speech_fraction=frac).drop
    texts = [i.text for i in dev_items] + [s["text"] for i in longform_items for s in i.segments]
    texts += ["Thank you.", "Okay.", "You.", "Bye."]  # real words, when said
    for item in dev_items:
        state = VadState()
        run(vad, decode_audio(str(item.audio)), state)
        frac = speech_fraction(state, 0, 1000 * item.duration_s, pad_ms=100)
        assert frac is not None and frac >= 0.4, item.id
        assert not hallucination_verdict(item.text, speech_fraction=frac).drop, item.id
    for text in texts:
        assert not hallucination_verdict(text, speech_fraction=0.6).drop, text
        assert not hallucination_verdict(text, speech_fraction=0.6, no_speech_prob=0.9).drop, text
