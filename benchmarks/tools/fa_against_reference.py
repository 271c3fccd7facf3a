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
    errs = [float((a.detach().double() - r.detach()).norm() / r.detach().norm().clamp_min(1e-30))
            for a, r in zip((o, *grads), (ro, *rgrads))]
    same_inf = bool((torch.isinf(lse) == torch.isinf(rlse)).all())
    return "rel err o/dq/dk/dv " + " ".join(f"{e:.1e}" for e in errs) + f", lse -inf where the reference's: {same_inf}"
