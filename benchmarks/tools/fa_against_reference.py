"""Shared by the flash-attention memcheck experiments (benchmarks/experiments/*_memcheck.py):
one call of an ato_torch attention op with return_lse and its q, k, v gradients for a random
cotangent, against the float64 reference on the same inputs."""
import torch


def against_reference(fn, ref_fn, q, k, v, *args, **opts) -> str:
    """fn(q, k, v, *args, return_lse=True, **opts) and ref_fn on float64 copies (float tensor
    options in float64 too): "rel err o/dq/dk/dv ..., lse -inf where the reference's: ..."."""
    o, lse = fn(q, k, v, *args, return_lse=True, **opts)
    do = torch.randn_like(o)
    grads = torch.autograd.grad((o * do).sum(), (q, k, v))
    qr, kr, vr = (a.detach().double().requires_grad_() for a in (q, k, v))
    ropts = {n: (a.double() if torch.is_tensor(a) and a.is_floating_point() else a) for n, a in opts.items()}
    ro, rlse = ref_fn(qr, kr, vr, *args, return_lse=True, **ropts)
    rgrads = torch.autograd.grad((ro * do.double()).sum(), (qr, kr, vr))
    errs = [_err(a.detach().double(), r.detach()) for a, r in zip((o, *grads), (ro, *rgrads))]
    same_inf = bool((torch.isinf(lse) == torch.isinf(rlse)).all())
    return "rel err o/dq/dk/dv " + " ".join(errs) + f", lse -inf where the reference's: {same_inf}"


def _err(a, r) -> str:
    """Relative L2 error; where the reference is 0 in exact math (dq, dk when each query sees
    one key) and its norm below 1e-12, the absolute L2 error, marked "abs"."""
    diff, norm = float((a - r).norm()), float(r.norm())
    return f"{diff / norm:.1e}" if norm > 1e-12 else f"abs {diff:.1e}"
