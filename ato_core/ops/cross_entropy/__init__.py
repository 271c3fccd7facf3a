"""cross_entropy: the declaration. kernels.py (Triton), plans.py (checks, grids, settings),
reference.py, cases.py.

Its gradient is computed in the forward when it will be wanted (``forward_takes_grad``:
one more read of each row while it is in L2) and saved; the backward scales it by dloss in
place (``single_backward``: so one backward per forward in torch)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ato_core.op import Op

from . import plans, reference


class CE(NamedTuple):
    ignore_index: int
    reduction: str
    label_smoothing: float
    z_loss: float = 0.0
    softcap: Optional[float] = None
    return_z_loss: bool = False


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
                  softcap=None, return_z_loss=False):
    """Cross-entropy of logits [..., V] (class axis last, V up to 262144, as optax) against
    integer targets [...] (logits' shape without its last axis; e.g. [T, V] and [T], or
    [B, T, V] and [B, T]).

    Online log-sum-exp over the vocabulary (no fp32 copy of the logits). reduction: "none"
    (the targets' shape, fp32), "sum" or "mean" (a scalar, fp32); fp64 logits give fp64
    throughout. Targets equal to ignore_index contribute nothing, and "mean" divides by the
    count of the others (zero tokens: "mean" is NaN, "sum" 0, as torch's).

    softcap (Gemma 2): each logit x becomes softcap * tanh(x / softcap) before everything
    else. z_loss (PaLM; Liger's lse_square_scale): each row's loss gains z_loss * lse**2.
    return_z_loss: return (loss, z) with z that term, reduced as the loss (it is already in
    the loss; z is for logging and carries no gradient). Targets outside [0, V) that are
    not ignored raise ValueError where their values are on the host (CPU arrays, outside
    jax.jit); on a GPU (where checking would cost a synchronisation every call) and under
    jit such a row's loss and gradient are NaN.

    When a gradient will be wanted, it is computed in the forward (one more read of each
    row) and held until the backward, which scales it by dloss in place (nothing to do
    when dloss is 1): logits' shape and dtype, the memory the backward would allocate
    anyway. It is rounded to the logits' dtype before that scaling (once more when
    dloss != 1). In torch the graph allows one backward: a second (retain_graph) raises
    RuntimeError."""


    if isinstance(z_loss, int) and not isinstance(z_loss, bool):
        z_loss = float(z_loss)
    if isinstance(softcap, int) and not isinstance(softcap, bool):
        softcap = float(softcap)
    return (logits, targets), CE(ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss)


def _forward(s, st: CE, target, grad):
    return plans.forward_plan(s["logits"], s["targets"], ignore_index=st.ignore_index, reduction=st.reduction,
                              label_smoothing=st.label_smoothing, grad=grad, target=target, z_loss=st.z_loss,
                              softcap=st.softcap, return_z_loss=st.return_z_loss)


def _check_values(s, st: CE, host):
    values = host("targets")
    if values is not None:
        plans.check_target_values(values, s["logits"].shape[-1], st.ignore_index)


CROSS_ENTROPY = Op(
    cross_entropy, inputs=("logits", "targets"), results=("loss", "dlogits", "z_loss"),
    returns=lambda st: ("loss", "z_loss") if st is not None and st.return_z_loss else ("loss",),
    saved=("dlogits",), differentiable=("logits",), nondifferentiable=("z_loss",), forward=_forward,
    backward=lambda s, st, target: plans.backward_plan(s["dlogits"], s["dloss"], target=target),
    forward_takes_grad=True, single_backward=lambda specs, static: plans.in_place(specs[0].dtype), check_values=_check_values,
    reference=reference.cross_entropy, family="cross_entropy", batch=("logits", "targets"))

OPS = (CROSS_ENTROPY,)
