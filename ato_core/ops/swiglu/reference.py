"""Reference SwiGLU: silu(gate) * up."""

from __future__ import annotations

from array_api_compat import array_namespace


def swiglu(gate, up):
    xp = array_namespace(gate, up)
    return gate / (1 + xp.exp(-gate)) * up
