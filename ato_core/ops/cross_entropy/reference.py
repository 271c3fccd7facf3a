"""Reference cross-entropy: logits [..., V], targets [...] (rows T = the leading dims); loss_i = lse_i - (1 - eps) x_{i,t_i}
- eps * mean_j x_ij for targets other than ignore_index (0 for those); mean divides by
their count."""

from __future__ import annotations

from array_api_compat import array_namespace, device


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    xp = array_namespace(logits)
    lead = tuple(targets.shape)
    V = logits.shape[-1]
    logits, targets = xp.reshape(logits, (-1, V)), xp.reshape(targets, (-1,))
    m = xp.max(logits, axis=-1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(logits - m), axis=-1)) + m[:, 0]
    onehot = xp.arange(V, device=device(logits))[None, :] == targets[:, None]
    xt = xp.sum(xp.where(onehot, logits, xp.zeros_like(logits)), axis=-1)  # (a -inf elsewhere: not 0 * -inf)
    loss = lse - xt
    if label_smoothing:
        loss = loss + label_smoothing * (xt - xp.mean(logits, axis=-1))
    valid = targets != ignore_index
    loss = xp.where(valid, loss, xp.zeros_like(loss))
    if reduction == "none":
        return xp.reshape(loss, lead)
    total = xp.sum(loss)
    return total / xp.sum(xp.astype(valid, logits.dtype)) if reduction == "mean" else total
