"""Reference softmax over the last axis: exp(x/T - max) / sum."""

from __future__ import annotations

from array_api_compat import array_namespace


def softmax(x, *, temperature=1.0):
    xp = array_namespace(x)
    s = x / temperature
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)
