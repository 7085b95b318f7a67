import os

import pytest
import torch

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


@pytest.fixture
def device():
    """Where kernel tests run: the GPU when there is one, else CPU tensors under the Triton interpreter."""
    return "cuda" if torch.cuda.is_available() else "cpu"
