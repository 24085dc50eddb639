"""Many streams stepped together (``model.streams()``, ``Lockstep``, the packed passes of
``model/batched.py``) give each stream what it gets alone; one stream's failure stays its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from susurrus.audio.io import decode_audio
from susurrus.model import batched
from susurrus.model.caches import DecoderCache, EncoderCache
from susurrus.model.whisper import top_entries
from susurrus.streaming.batch import BatchError
from susurrus.streaming.calls import DecodeTokens, Lockstep
from susurrus.streaming.state import CrossBuffer, silence_cross_kv
from susurrus.streaming.vad import TurnConfig

SR = 16000


def _encoder_rows(net, sizes, real: int) -> list[tuple[torch.Tensor, EncoderCache, torch.Tensor | None]]:
    """Random encoder rows ``(frames, cache, mask)``, one per ``(cached, new)`` frame count; the
    row of 60 new frames masked as a step's silence continuation is (its first ``real`` frames
    do not attend to the rest)."""
    width = net.dims.n_audio_state
    rows = []
    with torch.inference_mode():
        for n_past, n_new in sizes:
            cache = EncoderCache.empty(net.dims.n_audio_layer)
            if n_past:
                _, cache = net.encoder.forward_frames(torch.randn(1, n_past, width), cache)
            mask = None
            if n_new == 60:
                mask = torch.zeros(n_new, n_past + n_new)
                mask[:real, n_past + real:] = -float("inf")
            rows.append((torch.randn(1, n_new, width), cache, mask))
    return rows


def _assert_decoded_as_alone(net, rows) -> None:
    """A packed decoder pass over ``rows`` ``(tokens, cache)``: each row's hidden states,
    alignment scores and cache length as its own pass gives them."""
    outs = batched.decode_tokens(net.decoder, rows, net.alignment_heads)
    for (tokens, cache), (hidden, new_cache, qk) in zip(rows, outs):
        ref, ref_cache, ref_qk = net.decoder(torch.tensor([tokens]), cache, alignment_heads=net.alignment_heads,
                                             project=False)
        assert torch.allclose(hidden, ref, atol=1e-4)
        assert torch.allclose(qk, ref_qk, atol=1e-3)
        assert new_cache.offset == ref_cache.offset


def test_packed_passes_equal_each_row_alone(tiny_float32):
    """Rows of different lengths over caches of different lengths (one masked as the silence
    continuation is): packed outputs and caches equal each row's own forward pass (float32: a
    bf16 encoder's rows run one by one, ``calls.Packing``)."""
    net = tiny_float32.net
    torch.manual_seed(0)
    width = net.dims.n_audio_state
    rows = _encoder_rows(net, ((0, 7), (40, 25), (13, 60)), real=50)
    with torch.inference_mode():
        packed = batched.encode_frames(net.encoder, rows)
        for (frames, cache, mask), (out, new_cache) in zip(rows, packed):
            ref, ref_cache = net.encoder.forward_frames(frames, cache, mask)
            assert torch.allclose(out, ref, atol=1e-5)
            assert new_cache.length == ref_cache.length
            assert torch.allclose(new_cache.layers[-1].k, ref_cache.layers[-1].k, atol=1e-5)

        audio = [net.decoder.cross_kv(torch.randn(1, 1500, width)) for _ in range(3)]
        prompt = [50257, 50362]
        drows = []
        for cross, past in zip(audio, ([], [314, 561, 290], [11, 12])):
            cache = DecoderCache(cross, [None] * net.dims.n_text_layer)
            if past:
                _, cache, _ = net.decoder(torch.tensor([prompt + past]), cache, project=False)
            drows.append(([464] if past else prompt, cache))
        _assert_decoded_as_alone(net, drows)


@pytest.mark.parametrize("queries", [256, 3])
def test_rows_reading_the_shared_silence_equal_each_row_alone(tiny_float32, monkeypatch, queries):
    """Streams' cross-attention reads their own frames, then the silence every stream shares
    (``CrossBuffer``); a packed pass multiplies all rows' queries with the shared part at once,
    each from its own start, at most ``SHARED_QUERIES`` queries a product (3: the rows split
    into products of two rows and rows alone). Rows with no real frame, a few hundred, and a
    full window (nothing shared), one and several tokens: each row's hidden states and
    alignment scores equal its own pass."""
    monkeypatch.setattr(batched, "SHARED_QUERIES", queries)
    net = tiny_float32.net
    torch.manual_seed(2)
    width = net.dims.n_audio_state
    silence = silence_cross_kv(net)
    prompt = [50257, 50362]
    rows = []
    with torch.inference_mode():
        for real, tokens in ((0, prompt), (120, [464]), (700, prompt + [314, 561]), (1500, [290]), (333, [11])):
            buffer = CrossBuffer(silence)
            if real:
                buffer.write(0, net.decoder.cross_kv(torch.randn(1, real, width)))
            rows.append((tokens, DecoderCache(list(buffer.kv), [None] * net.dims.n_text_layer)))
        assert sum(row[1].cross[0].shared() is not None for row in rows) == 4
        _assert_decoded_as_alone(net, rows)


def test_shortlist_of_a_row_is_topk_of_it():
    """``top_entries`` (the rescored shortlist) is ``topk``'s, indices and order, on rows with
    many ties, with masked entries, and with a NaN."""
    torch.manual_seed(3)
    for trial in range(300):
        row = torch.randn(51864)
        if trial % 3 == 1:
            row = (row * 20).round() / 4  # many ties among the largest
        if trial % 3 == 2:
            row[torch.randint(0, 51864, (500,))] = -float("inf")
            row[50257:] = -float("inf")
        assert torch.equal(top_entries(row, 32), row.topk(32).indices)
    assert torch.equal(top_entries(torch.arange(40.0), 32), torch.arange(40.0).topk(32).indices)
    row = torch.randn(51864)
    row[7] = float("nan")  # ranked first by topk
    assert torch.equal(top_entries(row, 32), row.topk(32).indices)
    for other in (row.double(), row.bfloat16(), torch.randn(51864, requires_grad=True)):  # not ranked from a floor
        assert torch.equal(top_entries(other, 32), other.topk(32).indices)


def test_shortlist_logits_of_a_position_do_not_depend_on_the_rows_beside_it(tiny):
    """The int8 shortlist pass quantises each position on its own scale: a position's
    approximate logits are bit-identical alone and packed with other streams' positions of
    very different magnitudes (calls.run_together projects a round's rows in one pass)."""
    dec = tiny.net.decoder
    torch.manual_seed(1)
    rows = torch.randn(9, tiny.net.dims.n_text_state) * torch.tensor([0.1, 1, 30, 2, 5, 0.5, 80, 1, 3])[:, None]
    with torch.inference_mode():
        packed = dec.project_approx(rows)
        for i in range(len(rows)):
            assert torch.equal(dec.project_approx(rows[i:i + 1])[0], packed[i])
        exact = rows @ dec.output_t
    # an approximation of the float logits whose shortlist of 32 holds the true best token
    assert not torch.equal(packed, exact)
    for approx, best in zip(packed, exact.argmax(-1)):
        assert int(best) in approx.topk(32).indices.tolist()


def _alone(model, audio: np.ndarray, piece: int, settings: dict) -> list:
    stream = model.stream(**settings)
    for i in range(0, len(audio), piece):
        stream.feed(audio[i:i + piece])
    stream.finish()
    return stream.words


@pytest.mark.slow
def test_streams_stepped_together_equal_each_stream_alone(tiny, dev_items, hard_items):
    """Seven real recordings of different lengths (1.9 s to 10 s; dev and hard: accents, noise,
    telephone band), two of them with turn detection, fed in pieces of different sizes and
    started at different times, stepped together: each stream commits the words (text and
    times) it commits alone."""
    english = [item for item in dev_items if item.language == "en"]
    items = english[:2] + [english[-3], english[-1]] + hard_items[:: max(1, len(hard_items) // 4)][:3]
    audios = [decode_audio(item.audio) for item in items]
    pieces = [1600, 2400, 800, 4000, 1600]
    settings = [dict(turns=TurnConfig()) if k in (2, 6) else {} for k in range(len(items))]
    batch = tiny.streams()
    streams = [batch.stream(**s) for s in settings]
    starts = [3 * k * 1600 for k in range(len(items))]  # later streams join while others run
    offsets = [0] * len(items)
    t = 0
    while any(o < len(a) for o, a in zip(offsets, audios)):
        todo = {}
        for k, (stream, audio) in enumerate(zip(streams, audios)):
            if t >= starts[k] and offsets[k] < len(audio):
                piece = pieces[k % len(pieces)]
                todo[stream] = audio[offsets[k]:offsets[k] + piece]
                offsets[k] += piece
        batch.feed(todo)
        t += 1600
    batch.finish(streams)
    for k, (stream, audio) in enumerate(zip(streams, audios)):
        alone = _alone(tiny, audio, pieces[k % len(pieces)], settings[k])
        assert [w.word for w in stream.words] == [w.word for w in alone], items[k].id
        assert np.allclose([w.start for w in stream.words], [w.start for w in alone], atol=0.021)
    assert sum(len(s.words) for s in streams) > 75  # (88 words)
    assert batch.calls_per_round > 1.5  # the streams' calls did share rounds (1.96 here)
    # what each kind of call cost: every call counted once, packed calls fewer passes than calls
    costs = batch.costs
    assert {"EncodeFrames", "DecodeTokens", "CrossKV", "VadFrames"} <= set(costs)
    assert sum(c.calls for c in costs.values()) == batch._lockstep.calls
    assert all(0 < c.passes <= c.calls and c.seconds > 0 for c in costs.values())
    assert costs["DecodeTokens"].passes < costs["DecodeTokens"].calls


@pytest.mark.slow
def test_one_streams_bad_audio_fails_only_that_stream(tiny, dev_item):
    """NaN audio for one stream: a BatchError names it, the other streams' events come back,
    and the failed stream loses nothing it had accepted: it goes on and finishes as if the bad
    piece had never been sent."""
    audio = decode_audio(dev_item("jfk_inaugural").audio)[: 6 * SR]
    batch = tiny.streams()
    good, bad = batch.stream(), batch.stream()
    batch.feed({good: audio[:SR], bad: audio[:SR]})
    nan = audio[SR:2 * SR].copy()
    nan[100] = np.nan
    with pytest.raises(BatchError) as caught:
        batch.feed({good: audio[SR:2 * SR], bad: nan})
    assert set(caught.value.errors) == {bad} and "NaN" in str(caught.value.errors[bad])
    assert good in caught.value.events
    batch.feed({good: audio[2 * SR:], bad: audio[SR:]})
    batch.finish([good, bad])
    assert bad.text == good.text and len(good.words) >= 5
    with pytest.raises(ValueError, match="not a stream of this batch"):
        batch.feed({object(): audio})


def test_a_failing_generator_ends_alone(tiny):
    """A step generator that raises after its first call ends with its error; the others in
    the same rounds run to their ends."""
    net = tiny.net
    cross = net.decoder.cross_kv(torch.zeros(1, 1500, net.dims.n_audio_state))

    def steps(n: int, fail: bool):
        cache = DecoderCache(cross, [None] * net.dims.n_text_layer)
        _, cache, _, _ = yield DecodeTokens([50257, 50362], cache)
        if fail:
            raise RuntimeError("stream broke")
        for _ in range(n):
            _, cache, _, _ = yield DecodeTokens([464], cache)
        return cache.offset

    ended = {}
    lockstep = Lockstep(net)
    for name, n, fail in (("a", 1, False), ("b", 3, True), ("c", 4, False)):
        lockstep.add(steps(n, fail), lambda v, e, c, name=name: ended.setdefault(name, (v, e, c)))
    rounds = 0
    while lockstep.round():
        rounds += 1
    assert ended["a"][0] == 3 and ended["c"][0] == 6 and rounds == 5
    assert isinstance(ended["b"][1], RuntimeError) and ended["b"][0] is None
    assert all(c > 0 for _, _, c in ended.values())


def test_an_urgent_generator_runs_its_rounds_before_the_others(tiny):
    """A commit's end (``urgent``) does not wait behind other streams' calls: while it is live
    a round runs only it; the others go on after it, with the same results."""
    net = tiny.net
    cross = net.decoder.cross_kv(torch.zeros(1, 1500, net.dims.n_audio_state))

    def steps(n: int):
        cache = DecoderCache(cross, [None] * net.dims.n_text_layer)
        _, cache, _, _ = yield DecodeTokens([50257, 50362], cache)
        for _ in range(n):
            _, cache, _, _ = yield DecodeTokens([464], cache)
        return cache.offset

    ended = []
    lockstep = Lockstep(net)
    lockstep.add(steps(3), lambda v, e, c: ended.append(("other", v)))
    assert lockstep.round() == 1  # the other stream's first call
    lockstep.add(steps(2), lambda v, e, c: ended.append(("urgent", v)), urgent=True)
    calls = []
    while n := lockstep.round():
        calls.append(n)
        if len(calls) <= 3:
            assert len(lockstep) == 1 + (len(calls) < 3)  # the other waits while the urgent one runs
    assert ended == [("urgent", 4), ("other", 5)] and calls == [1] * 6


def test_a_rest_window_waits_for_the_realtime_streams_rounds(tiny, dev_item):
    """A worker holding a realtime stream and a REST job: the job's next window (a second or
    more of compute) is background work, run once the stream's step is done, not before it
    (it used to run as soon as it was read, between two rounds of the step)."""
    import threading
    from multiprocessing import Pipe

    from susurrus.server.workers.process import WorkerLoop

    audio = decode_audio(dev_item("jfk_inaugural").audio)
    server, worker = Pipe()
    loop = WorkerLoop(worker, tiny)
    # all in the pipe before the worker reads any (small messages: they fit its buffer)
    server.send((1, "open", 7, {}))
    feeds = list(range(10, 18))
    for req, i in zip(feeds, range(0, 8 * 1600, 1600)):  # 0.8 s in 100 ms appends: a step completes
        server.send((req, "feed", 7, audio[i:i + 1600]))
    server.send((2, "iterate", 8, (_offline_job, (dev_item("jfk_inaugural").audio, 3.0))))
    server.send((3, "next", 8, None))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    replies = []
    while len(replies) < 3 + len(feeds):
        assert server.poll(120), f"the worker answered only {replies}"
        req, ok, result, *_ = server.recv()
        assert ok, result
        replies.append(req)
    server.send((0, "exit", 0, None))
    thread.join(timeout=30)
    assert loop.lockstep.rounds > 0
    assert replies.index(3) > max(replies.index(req) for req in feeds)  # the window after every feed


def _offline_job(model, path, seconds: float):
    """A REST job as the server's (``offline.run``) on the first ``seconds`` of ``path`` (a path,
    not the samples: the test's messages stay small enough to wait in the pipe)."""
    from susurrus.decoding import offline

    return offline.run(model, decode_audio(path)[: int(seconds * SR)], {"beam_size": 1})


@pytest.mark.slow
@pytest.mark.parametrize("window_ms, grid_ms", [(0.0, 0.0), (50.0, 0.0), (0.0, 200.0)])
def test_a_worker_steps_its_streams_together_and_each_gets_its_own_text(tiny, dev_items, window_ms, grid_ms):
    """One worker process, three streams fed at once from three threads (as the server's sessions
    feed it): the worker's rounds carry several streams' calls, and each stream's text is what
    ``model.stream()`` gives alone; also when an idle worker waits 50 ms for a round to fill
    (``--batch-window-ms``: the worker waits the whole window each time it starts a round from
    idle, ~25 times with four streams, so 200 ms cost 5 s of waiting for the same rounds), and
    when due steps are held to a 200 ms grid (``--step-grid-ms``: a held feed's later requests,
    the finish among them, wait behind it)."""
    import threading

    from susurrus.server.workers.pool import WorkerPool, model_spec

    english = [item for item in dev_items if item.language == "en"][:3]
    audios = [decode_audio(item.audio)[: 4 * SR] for item in english]  # 4 s: 3 or 4 commits each (one is 1.9 s)
    with WorkerPool(model_spec(tiny, 1, window_ms=window_ms, grid_ms=grid_ms), 1) as pool:
        streams = [pool.stream() for _ in audios]

        def run(stream, audio) -> None:
            for i in range(0, len(audio), 1600):
                stream.feed(audio[i:i + 1600])
            stream.finish()

        threads = [threading.Thread(target=run, args=pair) for pair in zip(streams, audios)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        texts = [s.text for s in streams]
        ok, stats, _, _, _ = pool.workers[0].call("stats", 0).result(timeout=30)
    assert ok and stats["calls"] > stats["rounds"] > 0
    for item, audio, text in zip(english, audios, texts):
        assert text == _alone_text(tiny, item.id, audio)


_ALONE_TEXTS: dict[str, str] = {}


def _alone_text(model, key: str, audio: np.ndarray) -> str:
    """The text ``model.stream()`` gives alone, computed once for the three parametrisations
    above (the reference does not depend on the worker's settings)."""
    key = f"{key}:{len(audio)}"
    if key not in _ALONE_TEXTS:
        _ALONE_TEXTS[key] = "".join(w.word for w in _alone(model, audio, 1600, {}))
    return _ALONE_TEXTS[key]


@pytest.mark.slow
def test_bench_streams_items_together_with_the_same_results(tiny, dev_items, tmp_path):
    """``susurrus bench --streams 3``: three items at a time stepped together give every item
    the text, WER and words of the items streamed one by one, and each item a share of the CPU.
    The second run reads the first's offline references from ``--offline-cache`` (the offline
    transcription does not depend on how the items are streamed: it was a third of the time)."""
    from susurrus.evaluation import bench
    from susurrus.streaming.config import stream_config

    items = [item for item in dev_items if item.language == "en" and item.duration_s < 5][:3]  # 1.8 to 4.5 s
    config = stream_config("medium", language="en")
    cache = str(tmp_path / "offline.json")
    (alone,) = bench.run(tiny, items, [config], progress=False, offline_cache=cache)
    (together,) = bench.run(tiny, items, [config], progress=False, together=3, offline_cache=cache)
    assert [r.stream_text for r in together.items] == [r.stream_text for r in alone.items]
    assert together.wer == alone.wer and len(together.latencies) == len(alone.latencies)
    assert all(r.cpu_s > 0 for r in together.items)


def test_bf16_encoder_rows_pack_exactly_where_the_cpu_allows(tiny):
    """A bf16 encoder's rows of a round run packed, its layers of a shape this CPU's bfloat16
    kernels round differently with the rows around them (``calls.split_layers``, probed) row by
    row inside the packed pass (the float32 decoder's layers of the same shapes stay packed),
    and one by one only where no layer packs exactly; either way every row's outputs and cache
    are bit-identical to its pass alone, a one-frame row's too (its products take another
    kernel: it runs alone)."""
    from susurrus.streaming.calls import (
        EncodeFrames,
        Packing,
        bf16_packs_exactly,
        run_alone,
        run_together,
        split_layers,
    )

    net = tiny.net
    shapes = {tuple(m.weight.shape) for m in net.encoder.blocks.modules() if hasattr(m, "product")}
    if not shapes:
        pytest.skip(f"tiny.en loaded as {tiny.compute_type}: no bfloat16 encoder on this CPU")
    split = split_layers(net.encoder)
    assert split == {s for s in shapes if not bf16_packs_exactly(s, torch.get_num_threads())}
    assert (EncodeFrames in Packing.of(net).alone) == (split >= shapes)
    assert not split_layers(net.decoder)  # the decoder is float32: its rows pack, none split
    torch.manual_seed(2)
    calls = [EncodeFrames(*row) for row in _encoder_rows(net, ((0, 107), (150, 107), (64, 1), (30, 60)), real=40)]
    with torch.inference_mode():
        together = run_together(net, calls)
        for call, (out, cache) in zip(calls, together):
            ref, ref_cache = run_alone(net, call)
            assert torch.equal(out, ref)
            assert torch.equal(cache.layers[-1].k, ref_cache.layers[-1].k)


def test_layers_split_from_a_packed_pass_multiply_each_row_alone(tiny_float32):
    """A packed pass whose linear layers all multiply row by row (``split``) gives every row
    bit for bit what it gets alone, on any CPU (float32: packed, its products round with the
    number of rows); splitting only the MLP's second layer changes that layer's rounding only."""
    net = tiny_float32.net
    torch.manual_seed(3)
    rows = _encoder_rows(net, ((0, 107), (150, 82), (30, 60)), real=40)
    every = {tuple(m.weight.shape) for m in net.encoder.blocks.modules() if isinstance(m, torch.nn.Linear)}
    with torch.inference_mode():
        split = batched.encode_frames(net.encoder, rows, split=every)
        for (frames, cache, mask), (out, new_cache) in zip(rows, split):
            ref, ref_cache = net.encoder.forward_frames(frames, cache, mask)
            assert torch.equal(out, ref)
            assert all(torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
                       for a, b in zip(new_cache.layers, ref_cache.layers))
        seen: dict[str, list[int]] = {"up": [], "down": []}
        hooks = [block.mlp[i].register_forward_hook(lambda m, a, _, k=k: seen[k].append(a[0].shape[0]))
                 for block in net.encoder.blocks for i, k in ((0, "up"), (2, "down"))]
        try:
            some = batched.encode_frames(net.encoder, rows, split={tuple(net.encoder.blocks[0].mlp[2].weight.shape)})
        finally:
            for hook in hooks:
                hook.remove()
        assert seen["down"] == [107, 82, 60] * len(net.encoder.blocks)  # each row's block on its own
        assert seen["up"] == [249] * len(net.encoder.blocks)  # the rows packed
        packed = batched.encode_frames(net.encoder, rows)
        for (out, _), (ref, _) in zip(some, packed):
            assert torch.allclose(out, ref, atol=1e-5)


# bf16: 4 s (18 words), its encoder's products emulated on a CPU without bf16 instructions
@pytest.mark.parametrize(("compute_type", "seconds", "shift_s"),
                         [("int8_encoder", 6, 0.25), ("bf16_encoder", 4, 0.021)])
@pytest.mark.slow
def test_row_by_row_parts_keep_batching_exact(dev_item, tiny, compute_type, seconds, shift_s):
    """An int8 encoder (dynamic quantisation: each pass quantises its input as a whole) runs its
    calls of a round one by one (``calls.Packing``), a bf16 one packed where the CPU allows
    it (the test above); the decoder's float rows stay packed. Streams stepped together then
    commit exactly the words each commits alone. Their times may move by a frame or two: the
    float parts are packed, and the alignment heads' attention then differs by rounding, on
    some CPUs enough for DTW to take a neighbouring path (as in float32, docs/benchmarks.md
    "Many streams, one engine": up to 0.24 s on an AMX Xeon). A word after a pause moves most,
    its start anywhere in the pause: jfk's " what" after "ask not," 0.16 s with the int8 encoder
    on an AMD EPYC at two threads (0.02 s at one)."""
    import susurrus
    from susurrus.streaming.calls import EncodeFrames, Packing

    # the session's tiny.en where it is this compute type (auto: bf16_encoder on a CPU with
    # bf16 instructions): a second copy would repeat its load, silence encode and probes
    model = tiny if tiny.compute_type == compute_type else susurrus.load_model("tiny.en", compute_type=compute_type)
    if compute_type.startswith("int8"):
        assert Packing.of(model.net).alone == (EncodeFrames,)
    assert DecodeTokens not in Packing.of(tiny.net).alone
    audios = [decode_audio(dev_item(i).audio)[: seconds * SR] for i in ("jfk_inaugural", "ljspeech_LJ001-0001")]
    batch = model.streams()
    streams = [batch.stream() for _ in audios]
    for i in range(0, seconds * SR, 1600):
        batch.feed({s: a[i:i + 1600] for s, a in zip(streams, audios)})
    batch.finish(streams)
    for stream, audio in zip(streams, audios):
        alone = _alone(model, audio, 1600, {})
        assert [w.word for w in stream.words] == [w.word for w in alone]
        assert max(abs(w.start - a.start) for w, a in zip(stream.words, alone)) <= shift_s
    assert batch.calls_per_round > 1.5


def test_step_due_says_when_a_feed_completes_a_step(tiny):
    """What a server's worker asks before holding a feed to its step grid (``--step-grid-ms``)."""
    stream = tiny.stream()
    step = stream.config.chunk_ms * SR // 1000
    assert not stream.step_due(step - 1) and stream.step_due(step)
    stream.feed(np.zeros(step - 100, np.float32))
    assert stream.step_due(100) and not stream.step_due(99)
    stream.feed(np.zeros(100, np.float32))  # the step ran: the next boundary is a step away
    assert not stream.step_due(step - 1) and stream.step_due(step)
