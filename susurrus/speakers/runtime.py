"""What both speaker encoders share: the error for missing weights or runtime, and running a
torch network on ONNX Runtime (exported once, the graph kept on disk)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from susurrus import disk_cache


class SpeakerEncoderMissing(RuntimeError):
    pass


def ort_session(net: nn.Module, example: torch.Tensor, weights: Path, stem: str, input_name: str):
    """``net`` as an ONNX Runtime session on one thread (``input_name``, batch axis dynamic), or
    None without ``onnx`` and ``onnxruntime``. Exported by torch (a few CPU-s, once: the graph is
    kept in the disk cache, :mod:`susurrus.disk_cache`, as ``STEM_DIGEST.onnx``, named by the
    weights' digest, and read from there after; where that cannot be written, it is exported
    again per process)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import hashlib
    import io
    import warnings

    digest = hashlib.sha1(weights.read_bytes()).hexdigest()[:16]
    root = disk_cache.root()
    cached = None if root is None else root / f"{stem}_{digest}.onnx"
    try:
        graph = cached.read_bytes() if cached else None
    except OSError:
        graph = None
    if graph is None:
        try:
            import onnx  # noqa: F401  (torch's exporter needs it; imported only here: ~1-4 s)
        except ImportError:
            return None
        buf = io.BytesIO()
        # traced outside inference mode (a caller's inference_mode would make the trace's tensors
        # inference tensors, which the LSTM's trace refuses), with no autograd record
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (example.clone(),), buf, input_names=[input_name], output_names=["embedding"],
                              dynamic_axes={input_name: {0: "batch"}},
                              dynamo=False)
        graph = buf.getvalue()
        if cached:
            disk_cache.write_whole(cached, lambda tmp: tmp.write_bytes(graph))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])


def run_network(feats: torch.Tensor, runtime: str, session, network, input_name: str):
    """``feats`` through the ONNX Runtime session (``session()``: None where onnx or onnxruntime
    is missing) or the torch network (``network()``): ``runtime`` "ort", "torch" or "auto" (ONNX
    Runtime where it is installed). A numpy array."""
    sess = session() if runtime != "torch" else None
    if sess is None and runtime == "ort":
        raise SpeakerEncoderMissing("the ONNX Runtime speaker encoder needs onnx and onnxruntime: pip install onnx")
    if sess is not None:
        return sess.run(None, {input_name: feats.numpy()})[0]
    return network()(feats).numpy()
