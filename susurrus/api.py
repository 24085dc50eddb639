"""The Python API: ``model = susurrus.load_model("tiny.en")``; ``model.transcribe(...)``."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from susurrus.audio.io import decode_audio
from susurrus.decoding.transcribe import TranscribeOptions, transcribe
from susurrus.model.layers import native_bf16
from susurrus.model.loading import LoadedModel, load_weights
from susurrus.model.tokenizer import Tokenizer
from susurrus.model.whisper import Whisper, quantize_linears
from susurrus.streaming.batch import StreamBatch
from susurrus.streaming.session import StreamSession, silence_cross_kv, stream_config
from susurrus.streaming.vad import SileroVad, load_vad
from susurrus.types import Segment, TranscriptionInfo

AudioInput = str | os.PathLike | BinaryIO | bytes | np.ndarray

# compute types: which residual blocks run their linear layers (attention projections, MLPs) on
# int8 weights (the rest of the model stays float32); faster-whisper's names where they exist
COMPUTE_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {  # name -> (kind, the parts whose linear layers use it)
    "float32": ("", ()),
    "int8": ("int8", ("encoder", "decoder")),
    "int8_encoder": ("int8", ("encoder",)),
    "int8_decoder": ("int8", ("decoder",)),
    "bf16_encoder": ("bf16", ("encoder",)),
    # the whole model (weights, caches, activations) in a half dtype: the GPU's types (on a CPU
    # they run, slowly: for tests); layer norms, softmaxes, logits and the mel stay float32
    "float16": ("half", ()),
    "bfloat16": ("half", ()),
}
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
CPU_ONLY = ("int8", "int8_encoder", "int8_decoder", "bf16_encoder")  # fbgemm int8, the CPU's bf16 instructions
AUTO = "auto"  # on a CPU: bf16_encoder where it multiplies bfloat16 in hardware, float32 elsewhere; on a GPU: bfloat16
DEVICES = "auto, cpu, cuda or cuda:N"


def resolve_device(device: str | torch.device | None = AUTO) -> torch.device:
    """The device ``device`` names: ``"auto"`` (or None) is the first CUDA GPU when torch sees
    one, else the CPU; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` themselves, checked (a CUDA device
    that is not there is a clear error, not a fall-back)."""
    if device is None or device == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be {DEVICES}, not {device!r}") from err
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"device must be {DEVICES}, not {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA GPU here (torch {torch.__version__}, "
                         f"CUDA build: {torch.version.cuda or 'no'}); use device='cpu' or 'auto'")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s)")
    return dev


def resolve_compute_type(compute_type: str, device: str | torch.device = "cpu") -> str:
    """The compute type ``compute_type`` stands for on ``device``. On a CPU ``"auto"`` is
    ``"bf16_encoder"`` where the CPU has bfloat16 instructions (AVX512-BF16, AMX: the encoder's
    products run ~2.5x the float32 rate, and the dev set streams the same text) and
    ``"float32"`` elsewhere (emulated bf16 is slower than float32); on a GPU it is
    ``"bfloat16"`` (``"float16"`` on a GPU without bfloat16). Any other name is itself, checked:
    the int8 and ``bf16_encoder`` types are the CPU's and are refused on a GPU."""
    cuda = torch.device(device).type == "cuda"
    if compute_type == AUTO:
        if cuda:
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return "bf16_encoder" if native_bf16() else "float32"
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute_type must be one of {[AUTO, *COMPUTE_TYPES]}, not {compute_type!r}")
    if cuda and compute_type in CPU_ONLY:
        raise ValueError(f"compute_type {compute_type!r} runs on a CPU only (int8: fbgemm's kernels; bf16_encoder: "
                         "the CPU's bfloat16 instructions); on a GPU use bfloat16, float16 or float32")
    return compute_type


class WhisperModel:
    """A loaded Whisper checkpoint with its tokenizer, ready to transcribe."""

    def __init__(self, loaded: LoadedModel, name: str):
        self.loaded = loaded
        self.name = name
        self.net: Whisper = loaded.net
        self.tokenizer = Tokenizer.from_json(loaded.tokenizer_json, self.net.is_multilingual)
        self._silence = None  # streaming's end-of-audio cross keys/values, made on first use
        self._vad: SileroVad | None = None  # voice activity model shared by streams, loaded on first use
        self.source: str = name  # the name or path it was loaded from (worker processes reload it)
        self.int8_output = False
        self.compute_type = "float32"
        self.device = str(loaded.net.device)  # "cpu", "cuda:0", ...

    @property
    def is_multilingual(self) -> bool:
        return self.net.is_multilingual

    def __repr__(self) -> str:
        d = self.net.dims
        return (f"WhisperModel({self.name!r}, layers={d.n_audio_layer}+{d.n_text_layer}, "
                f"width={d.n_audio_state}, multilingual={self.is_multilingual})")

    def transcribe(self, audio: AudioInput, **options: Any) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribe a file path, file object, encoded bytes or 16 kHz samples.

        Returns ``(segments, info)``: ``segments`` is a lazy iterator, so decoding happens as it
        is consumed. Options are those of :class:`TranscribeOptions` (``language``, ``task``,
        ``beam_size``, ``temperature``, ``word_timestamps``, ``without_timestamps``, ...).
        ``vad=True`` (the default) transcribes only the speech Silero VAD finds, as the stream
        does, with every time in the original audio's time base (``decoding/gate.py``): silence
        and noise give no segment; ``vad=False`` transcribes every 30 s window, as Whisper does.
        """
        known = {f.name for f in fields(TranscribeOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown transcribe option(s) {unknown}; known: {sorted(known)}")
        opts = TranscribeOptions(**options)
        if opts.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', not {opts.task!r}")
        if opts.language is not None and self.is_multilingual:
            self.tokenizer.with_options(opts.language, opts.task)  # validates the language code
        samples = decode_audio(audio)
        if not opts.vad:
            return transcribe(self.net, self.tokenizer, samples, opts)
        from susurrus.decoding import gate

        if self._vad is None:
            self._vad = load_vad()
        spans = gate.speech_spans(gate.speech_probabilities(self._vad, samples), len(samples))
        kept = gate.keep_speech(samples, spans)
        duration = len(samples) / gate.SAMPLE_RATE
        if not len(kept):  # no speech: no text, and no language to detect
            info = TranscriptionInfo(language=opts.language or "en", language_probability=0.0 if
                                     opts.language is None and self.is_multilingual else 1.0, duration=duration,
                                     task=opts.task if self.is_multilingual else "transcribe", duration_after_vad=0.0)
            return iter(()), info
        segments, info = transcribe(self.net, self.tokenizer, kept, opts)
        times = gate.TimeMap(tuple(spans))
        return gate.mapped(segments, times), gate.gated_info(info, duration, len(kept) / gate.SAMPLE_RATE)


    def stream(self, latency: str | None = None, *, chunk_ms: int | None = None,
               lookahead_ms: int | None = None, commit_margin_ms: int | None = None,
               policy: str | None = None, first_commit_ms: int | None = None, language: str | None = None,
               task: str | None = None, diarize: bool = False, speakers: int | None = None,
               min_speakers: int | None = None, max_speakers: int | None = None,
               speaker_refs: dict[str, Any] | None = None, speaker_tracker: Any = None,
               **settings: Any) -> StreamSession:
        """Open a live stream: ``for event in stream.events(blocks)`` feeds every block (16 kHz
        mono, float32 or int16) and finishes the stream when they run out, the last words
        included; by hand, ``events = stream.feed(pcm)`` as audio arrives and ``stream.finish()``
        at the end (its events hold the last words). Events are
        :class:`~susurrus.streaming.session.Interim` (the current guess, replaced by the next)
        and :class:`~susurrus.streaming.session.Committed` (final words with start, end and
        ``emitted_at``). ``latency`` picks a preset (low, medium, high); explicit settings
        override it. ``diarize``: each committed word gets a ``speaker`` (``S1``, ``S2``, ... in
        order of appearance; ``speakers`` / ``min_speakers`` / ``max_speakers`` bound the count,
        a voice past ``max_speakers`` is merged into the nearest; ``speaker_refs`` enrols
        named voices: name -> clip path or 16 kHz samples; :mod:`susurrus.speakers`; or a
        ready ``speaker_tracker``, ``susurrus.speakers.make_tracker(encoder="ge2e")``): the stream
        is then a :class:`~susurrus.speakers.stream.LabelledStream`."""
        if language is not None and self.is_multilingual:
            self.tokenizer.with_options(language, task or "transcribe")
        config = stream_config(latency, chunk_ms=chunk_ms, lookahead_ms=lookahead_ms,
                               commit_margin_ms=commit_margin_ms, policy=policy,
                               first_commit_ms=first_commit_ms, language=language, task=task, **settings)
        if self._silence is None:
            self._silence = silence_cross_kv(self.net)
        if (config.vad or config.turns) and self._vad is None:
            self._vad = load_vad()
        parts = (self.net, self.tokenizer, config, self._silence, self._vad)
        d = config.diarization  # set by a server session (speakers/settings.py)
        if not (diarize or speakers or speaker_refs or d is not None or speaker_tracker is not None):
            return StreamSession(*parts)
        # labels: the stream wrapped from above (the session itself knows nothing of speakers)
        from susurrus.speakers import make_tracker
        from susurrus.speakers.stream import LabelledStream

        if speaker_tracker is None:
            if d is not None:
                import numpy as np

                speakers, min_speakers, max_speakers = d.speakers, d.min_speakers, d.max_speakers
                speaker_refs = {n: np.array(e, np.float32) for n, e in d.refs} | (speaker_refs or {})
            speaker_tracker = make_tracker(speakers, min_speakers, max_speakers, speaker_refs,
                                           encoder=d.encoder if d is not None else None)
        return LabelledStream(*parts, tracker=speaker_tracker)

    def streams(self) -> StreamBatch:
        """Many live streams stepped together: ``batch = model.streams()``, ``s = batch.stream()``
        (the arguments of :meth:`stream`), ``batch.feed({s: pcm, ...})`` returns each stream's
        events and ``batch.finish([...])`` the last ones. Their encoder and decoder passes run
        packed, so 32 streams cost far less than 32 alone (docs/benchmarks.md)."""
        return StreamBatch(self)


def load_model(name_or_path: str | os.PathLike = "tiny.en", threads: int | None = None,
               int8_output: bool = False, compute_type: str = AUTO, device: str = AUTO) -> WhisperModel:
    """Load Whisper weights by embedded name (``tiny.en``, ``base``) or from a path: a
    CTranslate2 directory or model.bin, a Hugging Face checkpoint directory (or a repo id
    found in the local HF cache), or an OpenAI ``.pt`` file. Never downloads.

    ``int8_output`` projects to the vocabulary with int8 weights everywhere (~4x faster per
    token on CPU, lossy: near-ties flip, 1.5 WER points offline on the dev set). Streaming does
    not need it: it rescores an int8 shortlist exactly by default (docs/benchmarks.md).

    ``compute_type``: ``"auto"`` (the default: ``"bf16_encoder"`` on a CPU with bfloat16
    instructions, ``"float32"`` elsewhere; :func:`resolve_compute_type`; ``model.compute_type``
    says which), ``"float32"`` (exact: every product as the checkpoint's float32), ``"int8"``
    (the linear layers of the encoder's and the decoder's blocks on dynamically quantised int8
    weights: attention projections and MLPs; the conv stem, layer norms, embeddings and the
    vocabulary projection stay float32), or ``"int8_encoder"`` / ``"int8_decoder"`` (those of one side only). Applies
    to offline transcription and streaming alike. Lossy: on the dev set only tiny.en's
    ``int8_encoder`` stayed within 0.2 WER points of float32 (offline and streaming, 12 % less
    CPU); ``int8`` cost tiny.en 0.6 points offline and base 3.3 points streaming, for 14-26 %
    less CPU. ``"bf16_encoder"``: the encoder's linear layers in bfloat16 (:class:`~susurrus.model.
    whisper.Bf16Linear`) and its attention too (keys/values kept in bfloat16), on CPUs with
    bfloat16 instructions (AVX512-BF16, AMX; elsewhere a warning: emulated, slower); it held
    tiny.en and base within 0.2 points offline and streaming (docs/benchmarks.md).
    ``"float16"`` / ``"bfloat16"``: the whole model in that dtype (weights, caches, products),
    the GPU's types (``"auto"`` on a GPU is ``"bfloat16"``); layer norms, softmaxes, logits and
    the mel features stay float32. Their accuracy on a GPU is not measured yet.

    ``device``: ``"auto"`` (a CUDA GPU when torch sees one, else the CPU), ``"cpu"``,
    ``"cuda"`` or ``"cuda:N"`` (:func:`resolve_device`); ``model.device`` says which. The
    weights, every cache a stream makes and the encoder and decoder run there; the audio, the
    mel front end and the step's decisions stay on the host."""
    dev = resolve_device(device)
    compute_type = resolve_compute_type(compute_type, dev)
    if int8_output and dev.type != "cpu":
        raise ValueError("int8_output runs on a CPU only (fbgemm int8); a GPU projects every logit exactly")
    if threads:
        torch.set_num_threads(threads)
    loaded = load_weights(name_or_path)
    kind, parts = COMPUTE_TYPES[compute_type]
    if kind == "bf16" and not native_bf16():
        warnings.warn(f"compute_type={compute_type!r}: this CPU has no bfloat16 instructions (AVX512-BF16, AMX); "
                      "they are emulated, slower than float32", stacklevel=2)
    if parts:
        quantize_linears(loaded.net, parts, kind)
    if int8_output:
        loaded.net.decoder.quantize_output()
    if kind == "half":
        output_t = loaded.net.decoder.output_t  # float32 (freeze): the logits stay a float32 product
        loaded.net.to(HALF[compute_type])
        loaded.net.decoder.keep_float_output(output_t)
    if dev.type != "cpu":
        loaded.net.to(dev)
    name = str(name_or_path) if not isinstance(name_or_path, Path) else name_or_path.name
    model = WhisperModel(loaded, name)
    model.source = os.fspath(name_or_path)  # what reloads it elsewhere (the server's worker processes)
    model.int8_output = int8_output
    model.compute_type = compute_type
    model.device = str(dev)
    return model
