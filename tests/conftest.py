import pytest


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


CUDA = _cuda_available()


def pytest_collection_modifyitems(config, items):
    """The GPU tier (marker ``gpu``) is collected everywhere and skipped without CUDA."""
    if CUDA:
        return
    skip = pytest.mark.skip(reason="GPU tier: needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
