"""Shared fixtures: real speech from ../shared/data and real Whisper weights."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from susurrus.evaluation.data import read_manifest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SUSURRUS_DATA", REPO.parent / "shared" / "data"))

# torch threads per test process: the cores shared out among pytest-xdist's workers (one each on
# 2 cores). More threads than free cores is not just no faster: torch's OpenMP threads wait for
# each other at every operation, and a test ran 15 times slower beside one busy process at 2.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = int(os.environ.get("SUSURRUS_TEST_THREADS", max(1, (os.cpu_count() or 1) // _WORKERS)))
torch.set_num_threads(_THREADS)


@pytest.fixture(autouse=True)
def _torch_threads():
    """Every test starts at the worker's share, whatever a module or an earlier test set."""
    torch.set_num_threads(_THREADS)


def default_sigint() -> None:
    """In the child: Ctrl+C's default action back. pytest-xdist's workers ignore SIGINT, and a
    signal ignored stays ignored in the processes they start (Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def need_data(sub: str) -> Path:
    path = DATA / sub / "manifest.jsonl"
    if not path.exists():
        pytest.skip(f"real speech data absent: {path} not found (set SUSURRUS_DATA or place "
                    "../shared/data beside the checkout)")
    return path


FFMPEG = shutil.which("ffmpeg")  # this machine's ffmpeg, found before any test hides it


def path_without_ffmpeg() -> str:
    """PATH less every folder that holds an ``ffmpeg`` binary: a machine without ffmpeg, as far
    as ``shutil.which`` (and so susurrus) can tell."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not shutil.which("ffmpeg", path=d))


@pytest.fixture(params=["with ffmpeg", "without ffmpeg"])
def ffmpeg_or_not(request, monkeypatch) -> bool:
    """Runs a test twice, with an ffmpeg binary on PATH and without one (PATH set for this
    process and the children it starts); the first skips where no ffmpeg is installed
    (``.ci/run`` installs it). True when ffmpeg is on PATH."""
    if request.param == "with ffmpeg":
        if FFMPEG is None:
            pytest.skip("no ffmpeg on this machine (apt-get install ffmpeg; .ci/run installs it)")
        return True
    monkeypatch.setenv("PATH", path_without_ffmpeg())
    assert shutil.which("ffmpeg") is None
    return False


@pytest.fixture(scope="session")
def dev_items():
    return read_manifest(need_data("dev"))


@pytest.fixture(scope="session")
def longform_items():
    return read_manifest(need_data("longform"))


@pytest.fixture(scope="session")
def hard_items():
    return read_manifest(need_data("hard"))


@pytest.fixture(scope="session")
def dev_item(dev_items):
    def get(item_id: str):
        for item in dev_items:
            if item.id == item_id:
                return item
        pytest.skip(f"dev item {item_id} not in the manifest")
    return get


@pytest.fixture(scope="session")
def tiny():
    import susurrus

    return susurrus.load_model("tiny.en")


@pytest.fixture(scope="session")
def tiny_float32():
    """tiny.en with every product in float32 (``tiny`` is ``compute_type="auto"``: bf16 in the
    encoder on a CPU with bf16 instructions), for tests of float arithmetic itself."""
    import susurrus

    return susurrus.load_model("tiny.en", compute_type="float32")


@pytest.fixture(scope="session")
def base():
    import susurrus
    from susurrus.model.loading import ModelNotFoundError

    try:
        return susurrus.load_model("base")
    except ModelNotFoundError as err:
        pytest.skip(f"multilingual base not installed: {err}")


# ---------------------------------------------------------------- the realtime server on loopback

@pytest.fixture(scope="session")
def server(tiny):
    """A real uvicorn server on a free loopback port with tiny.en in two worker processes."""
    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits

    limits = Limits(max_message_bytes=256 * 1024, max_sessions=8)  # the default backlog bound
    with BackgroundServer(tiny, limits=limits, workers=2) as srv:
        yield srv


@pytest.fixture(scope="session")
def guarded_server(tiny):
    """A second server with an API key, two sessions at most and 2 s of buffered audio at most; its
    streams run in its own threads on the shared tiny.en (``--workers 0``)."""
    from susurrus.server.app import BackgroundServer
    from susurrus.server.realtime.settings import Limits

    limits = Limits(max_message_bytes=64 * 1024, max_buffered_s=2.0, max_sessions=2)
    with BackgroundServer(tiny, limits=limits, api_key="test-key", workers=0) as srv:
        yield srv
