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


def pytest_runtest_logreport(report):
    """With ATO_FAILURE_LOG set (benchmarks/tools/gpu_tier_sharded.sh): each failure's test and
    its first "E" line appended to that file as it happens, so that a shard stopped by a timeout
    (before pytest's own summary) still says why."""
    import os

    path = os.environ.get("ATO_FAILURE_LOG")
    if not path or not report.failed:
        return
    lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")] or \
        report.longreprtext.splitlines()[-1:]
    with open(path, "a") as f:
        f.write(f"{report.nodeid} ({report.when}): {lines[0][:400] if lines else '?'}\n")


@pytest.fixture
def walk(monkeypatch):
    """walk(True | False | "forward"): Based's causal passes take the state walks (or segments
    and a scan; "forward": the forward walks, the backward not) whatever B*H, plans rebuilt;
    the caches are emptied again afterwards (test_based.py, test_gpu.py)."""
    from ato_core.ops.based import plans

    from helpers import clear_plans

    plan_fns = (plans.forward_plan, plans.backward_plan)

    def choose(on):
        never = float("inf")
        monkeypatch.setattr(plans, "WALK_WAVES", plans.Waves(0.0 if on else never, 0.0 if on is True else never))
        clear_plans("based_attention", *plan_fns)

    yield choose
    monkeypatch.undo()
    clear_plans("based_attention", *plan_fns)


def _flash_switch(monkeypatch, name, value):
    """plans.<name> = value for one test, no flash plan cached from before or kept after."""
    from ato_core.ops.flash_attention import plans

    from helpers import clear_plans

    monkeypatch.setattr(plans, name, value)
    clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
    yield
    clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)


@pytest.fixture
def portable_backward(monkeypatch):
    """plans.HOPPER_BACKWARD off: the portable backward kernels on Hopper too."""
    yield from _flash_switch(monkeypatch, "HOPPER_BACKWARD", False)
