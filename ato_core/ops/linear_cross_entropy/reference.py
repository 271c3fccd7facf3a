"""Reference linear + cross-entropy: cross_entropy(x @ weight^T + bias, targets, ...) with the
logits stored (the readable form; ato_core.ops.cross_entropy.reference)."""

from __future__ import annotations

from array_api_compat import array_namespace

from ato_core.ops.cross_entropy.reference import cross_entropy


def linear_cross_entropy(x, weight, targets, *, bias=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         z_loss=0.0, softcap=None, return_z_loss=False):
    xp = array_namespace(x)
    logits = xp.matmul(x, xp.matrix_transpose(weight))
    if bias is not None:
        logits = logits + bias
    return cross_entropy(logits, targets, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap, return_z_loss=return_z_loss)
