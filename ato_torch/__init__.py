"""ato for PyTorch: every ato_core op (ato_core.ops) as a differentiable torch op.

CUDA tensors run compiled kernels; CPU tensors run the same kernels under Triton's
interpreter (set ATO_INTERPRET=1 to interpret on a GPU too). Each op is built from its
declaration by ato_torch.ops.build.
"""

from ato_core.ops import OPS as _OPS

from .ops import build as _build

globals().update({_name: _build(_op) for _name, _op in _OPS.items()})


def decode_schedule(block_table, seq_lens, *, block_size):
    """decode_attention's shared-prefix schedule (ato_core.ops.decode.schedule) of this batch
    layout, as int32 tensors on block_table's device. Built on the host: once per layout."""
    import torch

    from ato_core.ops.decode import DecodeSchedule
    from ato_core.ops.decode import decode_schedule as build

    s = build(block_table.cpu().numpy(), seq_lens.cpu().numpy(), block_size=block_size)
    return DecodeSchedule(*(torch.from_numpy(a).to(block_table.device) for a in s))


from . import nn  # noqa: E402  (modules on the ops above)

from .parallel import vocab_parallel_linear_cross_entropy  # noqa: E402

__all__ = sorted([*_OPS, "decode_schedule", "vocab_parallel_linear_cross_entropy"])
