"""ato for PyTorch: every ato_core op (ato_core.ops) as a differentiable torch op.

CUDA tensors run compiled kernels; CPU tensors run the same kernels under Triton's
interpreter (set ATO_INTERPRET=1 to interpret on a GPU too). Each op is built from its
declaration by ato_torch.ops.build.
"""

from ato_core.ops import OPS as _OPS

from .ops import build as _build

globals().update({_name: _build(_op) for _name, _op in _OPS.items()})
__all__ = sorted(_OPS)
