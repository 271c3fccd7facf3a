"""Where the NaN of tests/helpers._unseen_key_case's value reaches, per case, on the compiled
portable kernels (cuda): the rows of o, dq, dk, dv holding NaN, torch then JAX. Run when
test_gpu.py::test_attention_nan_value_no_query_sees_gpu fails (all four flash cases failed on an
H200, 2026-12-07, reason not recorded: results NVIDIA_H200-session62-gpu-tier.txt)."""
import sys

import numpy as np

sys.path.insert(0, "tests")  # run from the repository root on the GPU machine
from helpers import UNSEEN_KEY_CASES, unseen_nan_results  # noqa: E402

for name in UNSEEN_KEY_CASES:
    key, *results, _ = unseen_nan_results(name, "cuda")
    for framework, res in zip(("torch", "jax"), results):
        arrays = {"o": res.outputs[0], "lse": res.outputs[1][..., None], **{f"d{n}": g for n, g in res.grads.items()}}
        rows = {what: np.isnan(a[0, 0]).any(-1).nonzero()[0].tolist() for what, a in arrays.items()}
        print(name, f"(key {key})", framework, "NaN rows:", rows)
