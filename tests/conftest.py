import os
import subprocess

import pytest


def _pin_xdist_worker_to_a_gpu():
    """Under `pytest -n N` on a host with several GPUs, worker gw<i> sees only GPU i mod (GPU count) -- of the
    caller's CUDA_VISIBLE_DEVICES list when one is set -- so the GPU tests spread over the GPUs. Set before torch
    starts CUDA, which reads CUDA_VISIBLE_DEVICES once."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return
        visible = [str(i) for i, line in enumerate(ln for ln in listed.splitlines() if ln.startswith("GPU "))]
    os.environ["ONELA_XDIST_GPUS"] = str(len(visible))     # what the workers share (tests that need a GPU alone)
    if len(visible) > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[int(worker[2:]) % len(visible)]


_pin_xdist_worker_to_a_gpu()
import torch  # noqa: E402 -- after the pin

# Triton decides between compiling and interpreting when a kernel is defined (at import), so a CPU-only host
# must ask for the interpreter before any kernels module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the H200 (no GPU on this host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """For a module of tiny tensors (`pytestmark = pytest.mark.usefixtures("one_thread")`): one intra-op thread is
    fastest, and on a shared host two threads thrash."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def sm90_compile():
    """`run(args, timeout=600)`: `python *args` in a process without TRITON_INTERPRET (the interpreter patches
    Triton's language in this one), for a compile for sm_90a on this host with the ptxas and cuobjdump Triton
    ships (skips where a wheel lacks them); fails with its stderr on a non-zero exit, else returns its stdout."""
    import sys

    from tools.compile_report import _nvidia_tool
    for tool in ("ptxas", "cuobjdump"):
        if not os.access(_nvidia_tool(tool), os.X_OK):
            pytest.skip(f"Triton's {tool} not found at {_nvidia_tool(tool)} (a wheel without its NVIDIA binaries)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}

    def run(args, timeout=600):
        res = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)
        assert res.returncode == 0, res.stderr[-3000:]
        return res.stdout
    return run


@pytest.fixture
def device():
    """Where kernel tests run: the GPU when there is one, else CPU tensors under the Triton interpreter."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True, scope="session")
def transformers_gdn_in_torch_without_a_gpu():
    """transformers runs a Qwen3.5 model's GDN layers through fla's kernels wherever fla is installed (a dependency
    here, for the fla baseline); those kernels need a GPU -- under Triton's interpreter they ask the driver for
    the device and fail. Without a GPU the tests therefore give transformers back its own plain-torch GDN
    functions (the ones fla's stand in for), for the session."""
    if torch.cuda.is_available():
        yield
        return
    from oracles import transformers_gdn_in_torch
    with transformers_gdn_in_torch():
        yield
