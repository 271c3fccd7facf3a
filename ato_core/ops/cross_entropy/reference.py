"""Reference cross-entropy: logits [..., V], targets [...] (rows T = the leading dims); loss_i = lse_i - (1 - eps) x_{i,t_i}
- eps * mean_j x_ij + z_loss lse_i^2 for targets other than ignore_index (0 for those), the
logits first softcap tanh(x / softcap) when softcap is set; mean divides by their count."""

from __future__ import annotations

from array_api_compat import array_namespace, device


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
                  softcap=None, return_z_loss=False):
    xp = array_namespace(logits)
    lead = tuple(targets.shape)
    V = logits.shape[-1]
    logits, targets = xp.reshape(logits, (-1, V)), xp.reshape(targets, (-1,))
    if softcap is not None:
        logits = softcap * xp.tanh(logits / softcap)
    m = xp.max(logits, axis=-1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(logits - m), axis=-1)) + m[:, 0]
    onehot = xp.arange(V, device=device(logits))[None, :] == targets[:, None]
    xt = xp.sum(xp.where(onehot, logits, xp.zeros_like(logits)), axis=-1)  # (a -inf elsewhere: not 0 * -inf)
    loss = lse - xt
    if label_smoothing:
        loss = loss + label_smoothing * (xt - xp.mean(logits, axis=-1))
    valid = targets != ignore_index
    z = xp.where(valid, z_loss * lse * lse, xp.zeros_like(loss))
    loss = xp.where(valid, loss + z, xp.zeros_like(loss))
    out = tuple(_reduce(xp, v, valid, lead, reduction) for v in (loss, z))
    return out if return_z_loss else out[0]


def _reduce(xp, rows, valid, lead, reduction):
    if reduction == "none":
        return xp.reshape(rows, lead)
    total = xp.sum(rows)
    return total / xp.sum(xp.astype(valid, rows.dtype)) if reduction == "mean" else total
