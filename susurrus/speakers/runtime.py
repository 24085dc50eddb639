"""What both speaker encoders share: the error for missing weights or runtime, and running a
torch network on ONNX Runtime or OpenVINO (exported to ONNX once, the graph kept on disk)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from susurrus import disk_cache


class SpeakerEncoderMissing(RuntimeError):
    pass


def onnx_graph(net: nn.Module, example: torch.Tensor, weights: Path, stem: str, input_name: str) -> bytes | None:
    """``net`` exported to ONNX (``input_name``, batch axis dynamic), or None without ``onnx``.
    Exported by torch (a few CPU-s, once: the graph is kept in the disk cache,
    :mod:`susurrus.disk_cache`, as ``STEM_DIGEST.onnx``, named by the weights' digest, and read
    from there after; where that cannot be written, it is exported again per process)."""
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
    return graph


def ort_session(net: nn.Module, example: torch.Tensor, weights: Path, stem: str, input_name: str):
    """``net`` as an ONNX Runtime session on one thread (:func:`onnx_graph`), or None without
    ``onnx`` (where the graph is not on disk yet) and ``onnxruntime``."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    graph = onnx_graph(net, example, weights, stem, input_name)
    if graph is None:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])


class OpenVinoNetwork:
    """An ONNX graph compiled by OpenVINO for the CPU on one thread, in the precision OpenVINO
    takes by default for the CPU it finds (``precision``: bfloat16 where the CPU multiplies it
    natively, Intel AMX; float32 elsewhere, where :func:`openvino_network` does not use it).
    Called with a batch of inputs, it runs them one at a time through a graph compiled for one:
    a batch whose size changes from call to call costs OpenVINO ~2x a window, and each further
    compiled size ~100 MB of memory, for ~30 % less a window in batches of 4 (a stream's windows
    mostly come one at a time: a label never waits).
    One infer request per thread (the server's threads may share the network)."""

    def __init__(self, graph: bytes) -> None:
        import threading

        import openvino as ov

        core = ov.Core()
        model = core.read_model(graph)
        model.reshape([1, *list(model.input(0).get_partial_shape())[1:]])
        self.compiled = core.compile_model(model, "CPU", {
            "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
        self.precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # bf16, f32
        self.local = threading.local()

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        feats = np.ascontiguousarray(feats, np.float32)
        return np.concatenate([np.array(request.infer({0: feats[i: i + 1]})[0]) for i in range(len(feats))])


def openvino_bfloat16() -> bool:
    """Whether OpenVINO is installed and runs the CPU in bfloat16 by default (a CPU that
    multiplies it natively: Intel AMX). Elsewhere it runs float32, no faster than ONNX Runtime
    and ~170 MB more memory, so it is not used there."""
    if importlib.util.find_spec("openvino") is None:
        return False
    import openvino as ov

    return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name() == "bf16"


def openvino_network(net: nn.Module, example: torch.Tensor, weights: Path, stem: str,
                     input_name: str) -> OpenVinoNetwork | None:
    """``net`` on OpenVINO in bfloat16 (:class:`OpenVinoNetwork`, from :func:`onnx_graph`'s
    graph), or None without ``openvino`` or ``onnx``, or on a CPU without bfloat16
    (:func:`openvino_bfloat16`)."""
    if not openvino_bfloat16():
        return None
    graph = onnx_graph(net, example, weights, stem, input_name)
    return None if graph is None else OpenVinoNetwork(graph)


RUNTIMES = ("auto", "openvino", "ort", "torch")


def run_network(feats: torch.Tensor, runtime: str, session, network, input_name: str, openvino=None):
    """``feats`` through OpenVINO (``openvino()``, where given: None without openvino), the ONNX
    Runtime session (``session()``: None where onnx or onnxruntime is missing) or the torch
    network (``network()``): ``runtime`` one of ``RUNTIMES``, "auto" taking the first of them
    that is installed. A numpy array."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown speaker encoder runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    if runtime == "openvino" and openvino is None:
        raise ValueError("this speaker encoder has no OpenVINO runtime: runtime 'ort' or 'torch'")
    if runtime in ("auto", "openvino"):
        net = openvino() if openvino is not None else None
        if net is not None:
            return net(feats.numpy())
        if runtime == "openvino":
            raise SpeakerEncoderMissing("the OpenVINO speaker encoder needs openvino and onnx (pip install "
                                        "openvino onnx) and a CPU that runs bfloat16 (Intel AMX)")
    sess = session() if runtime != "torch" else None
    if sess is None and runtime == "ort":
        raise SpeakerEncoderMissing("the ONNX Runtime speaker encoder needs onnx and onnxruntime: pip install onnx")
    if sess is not None:
        return sess.run(None, {input_name: feats.numpy()})[0]
    return network()(feats).numpy()
