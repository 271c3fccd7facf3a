"""Reference SwiGLU: silu(gate) * up."""

from __future__ import annotations

from array_api_compat import array_namespace


def swiglu(gate, up):
    xp = array_namespace(gate, up)
    e = xp.exp(-xp.abs(gate))  # in (0, 1]: no overflow in the value or its derivative
    sigmoid = xp.where(gate >= 0, 1 / (1 + e), e / (1 + e))
    return gate * sigmoid * up
