"""linear_cross_entropy: the declaration. kernels.py (Triton), plans.py (checks, grids,
tiles), reference.py, cases.py. ato_torch / ato_jax also build its vocabulary-parallel form
from plans.py's pieces."""

from __future__ import annotations

from ato_core.op import Op
from ato_core.ops.cross_entropy import CE as LCE  # (the same options)

from . import plans, reference


def linear_cross_entropy(x, weight, targets, *, bias=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         z_loss=0.0, softcap=None, return_z_loss=False):
    """Cross-entropy of the logits x @ weight^T + bias without storing them: the language
    model head's loss. x [..., H], weight [V, H] (the embedding / lm_head matrix, V up to
    262144), bias [V] or None, integer targets [...] (x's shape without its last axis).
    fp32, fp16 or bf16 (x and weight alike; fp32 matmuls in full fp32, not TF32).

    Same semantics and options as ``cross_entropy(x @ weight.T + bias, targets, ...)``:
    ignore_index, reduction ("none": the targets' shape; "sum", "mean": a scalar; fp32),
    label_smoothing, z_loss, softcap, return_z_loss. Differentiable in x, weight and bias.

    Nothing of size [T, V] is stored. The forward keeps 4 numbers per row and vocabulary
    split and saves each row's log-sum-exp; the backward recomputes the logits a vocabulary
    chunk at a time (at most 128 MiB of dlogits in x's dtype, in two layouts, plus dx's
    fp32 sum [T, H]), accumulating dx and dweight in fp32 in a fixed order, no atomics:
    deterministic, bitwise the same in torch and JAX. Four matmuls in all, where the
    logits-storing form does three.
    dlogits is rounded to x's dtype before its two matmuls, as a stored bf16 logits'
    gradient would be. Targets outside [0, V) that are not ignored raise ValueError where
    their values are on the host; elsewhere their row's loss and gradient are NaN."""

    if isinstance(z_loss, int) and not isinstance(z_loss, bool):
        z_loss = float(z_loss)
    if isinstance(softcap, int) and not isinstance(softcap, bool):
        softcap = float(softcap)
    return (x, weight, targets, bias), LCE(ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss)


def _forward(s, st: LCE, target):
    return plans.forward_plan(s["x"], s["weight"], s["targets"], s["bias"], ignore_index=st.ignore_index,
                              reduction=st.reduction, label_smoothing=st.label_smoothing, z_loss=st.z_loss,
                              softcap=st.softcap, return_z_loss=st.return_z_loss, target=target)


def _backward(s, st: LCE, target):
    return plans.backward_plan(s["x"], s["weight"], s["targets"], s["bias"], s["dloss"],
                               v_total=s["weight"].shape[0], label_smoothing=st.label_smoothing, z_loss=st.z_loss,
                               softcap=st.softcap, target=target)


def _check_values(s, st: LCE, host):
    from ato_core.ops.cross_entropy.plans import check_target_values

    values = host("targets")
    if values is not None:
        check_target_values(values, s["weight"].shape[0], st.ignore_index)


LINEAR_CROSS_ENTROPY = Op(
    linear_cross_entropy, inputs=("x", "weight", "targets", "bias"), results=("loss", "lse", "scale", "z_loss"),
    returns=lambda st: ("loss", "z_loss") if st is not None and st.return_z_loss else ("loss",),
    saved=("x", "weight", "targets", "bias", "lse", "scale"), differentiable=("x", "weight", "bias"),
    optional=("bias",), nondifferentiable=("z_loss",), forward=_forward, backward=_backward,
    check_values=_check_values, reference=reference.linear_cross_entropy, family="linear_cross_entropy")

OPS = (LINEAR_CROSS_ENTROPY,)

VOCAB_PARALLEL_DOC = """linear_cross_entropy with the vocabulary sharded over devices (Megatron's vocabulary
    parallelism): every device holds all of x [..., H] and targets [...] and its own rows of
    the weight, [V / n, H] (device i the rows [i V / n, (i + 1) V / n) of the full [V, H], in
    the order of {where}), and bias [V / n] alike. Returns the loss over the whole
    vocabulary, the same on every device, as linear_cross_entropy of the full weight would
    (same options, same meaning); its gradients: x's summed over the devices (in fp32, then
    x's dtype), the weight's and bias's this device's rows.

    No logits are gathered: each device reduces its own columns to 4 numbers per row and
    split, the devices all-gather those ([n P, 4, T] fp32) and each merges them in device
    order, exactly as one device merges its own splits."""
