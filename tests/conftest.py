import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the H200 (no GPU on this host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def interpret(monkeypatch):
    """Run Triton kernels under the CPU interpreter (TRITON_INTERPRET=1) on hosts without a GPU."""
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    return os.environ.get("TRITON_INTERPRET") == "1"
