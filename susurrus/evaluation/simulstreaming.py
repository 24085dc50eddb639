"""SimulStreaming's policy as published, run on our weights, for comparison.

``whisperlivekit`` (PyPI, MIT; 0.2.26 measured) ships SimulStreaming's code: the AlignAtt
decoder (``whisperlivekit.simul_whisper``) over an openai-whisper port. It is an optional
dependency, imported only here::

    pip install --no-deps whisperlivekit==0.2.26 && pip install tiktoken numba

(``--no-deps``: its dependencies would replace the pinned torch with one that matches its
torchaudio; the simulstreaming backend needs none of them but tiktoken and numba.)

What runs is its ``SimulStreamingASR`` + ``SimulStreamingOnlineProcessor`` with the defaults of
its ``WhisperLiveKitConfig``: AlignAtt with ``frame_threshold`` 25 encoder frames, one beam
(its backend always builds the beam decoder: beam search with beam 1), no CIF end-of-word
model (none is shipped: without one, SimulStreaming keeps the last word of each update),
``audio_max_len`` 30 s, no init prompt; its own guards (stale and rewound words dropped,
repetition-loop reset). Not used: its server's voice activity controller (VAC), which at each
pause finishes the update as the last one and replaces the silence with zeros; the
PyTorch encoder is forced (``disable_fast_encoder``: the faster-whisper encoder needs a
CTranslate2 copy and is another implementation). The model is ours, written as an
openai-whisper ``.pt`` (``dims`` + ``model_state_dict``) in a temporary folder, with
openai-whisper's alignment heads of its size (what ``--model base`` gives there).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

# OpenAI's alignment heads (base85 of a gzipped boolean mask), as whisperlivekit has them
OPENAI_HEADS = {
    "tiny.en": "ABzY8J1N>@0{>%R00Bk>$p{7v037`oCl~+#00",
    "tiny": "ABzY8bu8Lr0{>%RKn9Fp%m@SkK7Kt=7ytkO",
    "base.en": "ABzY8;40c<0{>%RzzG;p*o+Vo09|#PsxSZm00",
    "base": "ABzY8KQ!870{>%RzyTQH3`Q^yNP!>##QT-<FaQ7m",
}


@dataclass(frozen=True)
class SimulWord:
    word: str  # with its leading space
    start: float  # SimulStreaming's own times (from the attended frames)
    end: float
    emitted_at: float  # seconds of audio fed when it was committed


def export_checkpoint(model, directory: str | Path, name: str) -> Path:
    """``model`` (a loaded susurrus model) as an openai-whisper checkpoint ``directory/name.pt``
    (the file's stem tells whisperlivekit whether the model is English-only)."""
    if getattr(model, "compute_type", "float32") != "float32":  # int8 layers hold no float weights to export
        raise ValueError(f"export needs a float32 model, not compute_type={model.compute_type!r}")
    path = Path(directory) / f"{name}.pt"
    state = {k: v.detach().float().clone() for k, v in model.net.state_dict().items()
             if isinstance(v, torch.Tensor) and "_int8" not in k}  # (not the decoder's int8 shortlist)
    torch.save({"dims": asdict(model.net.dims), "model_state_dict": state}, path)
    return path


def alignment_heads_of(model, name: str) -> str | None:
    """OpenAI's heads string for ``name``, after checking it against the heads our loader
    gives the model (None: not in the table, whisperlivekit then uses its default)."""
    code = OPENAI_HEADS.get(name)
    if code is None:
        return None
    from whisperlivekit.whisper.model import ModelDimensions, Whisper

    probe = Whisper(ModelDimensions(**asdict(model.net.dims)), decoder_only=True)
    probe.set_alignment_heads(code.encode())
    theirs = sorted(map(tuple, probe.alignment_heads.indices().T.tolist()))
    ours = sorted(map(tuple, torch.nonzero(model.net.alignment_heads).tolist()))
    if ours != theirs:
        raise ValueError(f"{name}: our alignment heads {ours} differ from OpenAI's {theirs}")
    return code


class SimulStreaming:
    """whisperlivekit's SimulStreaming backend on one checkpoint; :meth:`stream` runs an item."""

    def __init__(self, checkpoint: Path, language: str, alignment_heads: str | None = None):
        logging.getLogger("whisperlivekit").setLevel(logging.ERROR)
        from whisperlivekit.config import WhisperLiveKitConfig
        from whisperlivekit.simul_whisper import backend

        backend.load_file = lambda *args, **kwargs: None  # no warm-up file (it downloads one)
        d = WhisperLiveKitConfig()  # its defaults
        self._backend = backend
        self.asr = backend.SimulStreamingASR(
            warmup_file="", min_chunk_size=d.min_chunk_size, model_size=None, model_cache_dir=None,
            model_dir=None, model_path=str(checkpoint), encoder_model_path=None, decoder_model_path=None,
            lora_path=None, lan=language, direct_english_translation=False,
            disable_fast_encoder=True, custom_alignment_heads=alignment_heads,
            frame_threshold=d.frame_threshold, beams=d.beams, decoder_type=d.decoder_type,
            audio_max_len=d.audio_max_len, audio_min_len=d.audio_min_len, cif_ckpt_path=d.cif_ckpt_path,
            never_fire=d.never_fire, init_prompt=d.init_prompt, static_init_prompt=d.static_init_prompt,
            max_context_tokens=d.max_context_tokens, backend="whisper")

    @property
    def settings(self) -> dict:
        c = self.asr.cfg
        return {"frame_threshold": c.frame_threshold, "decoder": f"{c.decoder_type} {c.beam_size}",
                "cif": c.cif_ckpt_path or None, "never_fire": c.never_fire, "audio_max_len": c.audio_max_len,
                "rewind_threshold": c.rewind_threshold, "heads": self.asr.custom_alignment_heads}

    def stream(self, audio: np.ndarray, chunk_ms: int = 640) -> tuple[list[SimulWord], float]:
        """Feed ``audio`` in ``chunk_ms`` pieces as fast as it computes, an update after each
        (``process_iter``), and the last update at the end (``start_silence``, as its server
        finishes a stream); its committed words with ``emitted_at``, and the process CPU
        seconds."""
        block = chunk_ms * 16
        words: list[SimulWord] = []
        c0 = time.process_time()
        proc = self._backend.SimulStreamingOnlineProcessor(self.asr)  # (its decoding runs under no_grad)
        fed = 0
        for i in range(0, len(audio), block):
            piece = np.ascontiguousarray(audio[i:i + block], dtype=np.float32)
            fed += len(piece)
            proc.insert_audio_chunk(piece, fed / 16000)
            tokens, _ = proc.process_iter()
            words += [SimulWord(t.text, t.start, t.end, fed / 16000) for t in tokens or []]
        tokens, _ = proc.start_silence()
        words += [SimulWord(t.text, t.start, t.end, fed / 16000) for t in tokens or []]
        return words, time.process_time() - c0
