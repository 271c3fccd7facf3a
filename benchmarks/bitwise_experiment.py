"""Do ato_torch and ato_jax launch the same binary once torch stops specialising integer
arguments on divisibility by 16 (jax-triton never does)? Prints the relative difference
before and after, for one case per dtype."""

import numpy as np

from ato_cli import harness as h
from ato_core.kernels import feature_maps, linear_attention


def compare(tag):
    for dtype in ("float32", "bfloat16"):
        case = h.la_case(2, 4, 1024, 64, 64, dtype, causal=True, state=True, final=True)
        x = h.make_inputs(case)
        t, j = h.run_torch(case, x, "cuda"), h.run_jax(case, x)
        print(tag, dtype, "bitwise" if h.bitwise_equal(t, j) else f"differ {h.max_rel_err(j, t):.2e}", flush=True)


compare("default")
for mod in (linear_attention, feature_maps):
    for k in vars(mod).values():
        if hasattr(k, "params") and hasattr(k, "run"):
            for p in k.params:
                if not p.is_constexpr and not p.name.isupper():
                    p.do_not_specialize_on_alignment = True
            k.device_caches.clear() if hasattr(k, "device_caches") else None
compare("no-int-alignment")
