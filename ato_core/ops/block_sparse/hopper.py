"""Block-sparse attention's forward on Hopper (sm_90), in Gluon: flash_attention's Hopper forward
(flash_attention/hopper.py: a cp.async producer warpgroup filling a ring of K/V tiles, two
consumer warpgroups of 64 query rows whose QK wgmma of tile j runs beside the PV wgmma of tile
j - 1) walking a query block's list of kept key blocks (bs_lists_kernel's) instead of a range.

Blocks of 128 and 256 only: a program's 128 query rows lie in one query block, so its two
consumers share the list and the ring, and each kept block is BS // 128 key tiles of 128, as
the dense kernel's. (Blocks of 64 would give each consumer its own list and 64-key tiles; no
such form was faster than the portable kernel on an H100: results block_sparse-sweep.txt 38.)
The last kept blocks that cross the causal diagonal or Nk (kernels._masked_tail) are masked.
The math is kernels.bs_fwd_kernel's: causal aligned to the bottom right, GQA, o = 0 and lse =
-inf for a query that sees no key. fp16 / bf16, D 128; b, h and n strides multiples of 8
elements, unit d strides (the plan checks).
"""

from triton.experimental.gluon import language as gl

from ato_core.launch import kernel
from ..flash_attention.hopper import ROWS, _consumer, _forward_smem, _head, _producer, _query_program, _strides8
from .kernels import _masked_tail


@kernel(inputs=5, outputs=2, gluon=True)
def bs_fwd_hopper_kernel(Q, K, V, LIST, COUNT, Hq, G, Nq, Nk, Mq, Mk, qk_scale, sqb, sqh, sqn, skb, skh, skn, svb, svh,
                         svn, sob, soh, son, O, LSE, CAUSAL: gl.constexpr, BS: gl.constexpr, BLOCK_N: gl.constexpr,
                         D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (the first consumer; 12 in all). o and lse of query
    rows [128 i, 128 i + 128) over the kept key blocks of their query block (LIST [B * Hq * Mq,
    Mk], COUNT [B * Hq * Mq]: bs_lists_kernel's rows). qk_scale = softmax_scale * log2(e).
    Causal: the last query blocks (the most keys) run first."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sob, soh, son = _strides8(sob, soh, son)
    per: gl.constexpr = BS // BLOCK_N
    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)
    start_m = pid_m * (2 * ROWS)
    row = gl.program_id(1).to(gl.int64) * Mq + start_m // BS
    count = gl.load(COUNT + row)
    shift = Nk - Nq
    # the masked blocks of the first row's (a superset of the later rows')
    whole = count - _masked_tail(LIST, row * Mk, count, start_m, Nk, shift, BS, CAUSAL)
    tiles = (0, 0, whole * per, count * per)  # as _key_tiles': the masked ones last
    listed = LIST + row * Mk
    q_off = _head(b, h, 0, sqb, sqh, sqn, False)
    k_off = _head(b, hk, 0, skb, skh, skn, False)
    v_off = _head(b, hk, 0, svb, svh, svn, False)
    o_off = _head(b, h, 0, sob, soh, son, False)
    lse_off = gl.program_id(1).to(gl.int64) * Nq

    q0, q1, k_bufs, v_bufs, ready, empty = _forward_smem(Q, q_off, sqn, start_m, Nq, BLOCK_N, D, STAGES)
    gl.warp_specialize([
        (_consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, shift, shift,
                     qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), shift, start_m, tiles, listed, CAUSAL, False, False,
                     False, False, False, BLOCK_N, D, STAGES, BS)),
        (_consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, shift, shift,
                     qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), shift, start_m + ROWS, tiles, listed, CAUSAL, False,
                     False, False, False, False, BLOCK_N, D, STAGES, BS)),
        (_producer, (k_bufs, v_bufs, ready, empty, K, V, k_off, v_off, Nk, skn, svn, 0, count * per, BLOCK_N, D, STAGES,
                     CHUNK, listed, BS)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
