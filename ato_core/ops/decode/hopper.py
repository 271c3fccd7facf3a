"""decode_attention's chunk-first kernel on Hopper (sm_90), in Gluon: flash attention's Hopper
forward (flash_attention/hopper.py: a cp.async producer warpgroup filling a ring of K/V tiles,
two consumer warpgroups of 64 query rows with the QK wgmma of tile j beside the PV wgmma of
tile j - 1) over a shared prefix's paged blocks. The producer reads each key row at its block's
address (a tile's block ids loaded before it waits for the slot); each consumer gathers its query
rows (the task's sequences' query heads of one kv head) from q while the first copies fly. The math is
kernels.decode_chunk_kernel's. fp16 / bf16, D 128; q, k and v strides multiples of 8 elements
(16-byte rows for cp.async), unit d strides (the plan checks: plans._hopper_chunk).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, mbarrier

from ato_core.launch import kernel
from ..flash_attention.hopper import ROWS, _consumer, _forward_buffers, _strides8
from .kernels import work_item


@gluon.jit
def _paged_producer(k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt, num_blocks, lo, hi,
                    end, BLOCK_N: gl.constexpr, D: gl.constexpr, BS: gl.constexpr, STAGES: gl.constexpr,
                    CHUNK: gl.constexpr):
    """Key tiles [lo, hi) of BLOCK_N tokens (token t in block BLOCKS[t // BS], row t % BS; tokens
    from ``end`` on zero-filled; block ids clamped into the cache) by cp.async into the ring;
    each of the partition's 128 threads arrives on ready[slot] (noinc) when its copies land."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for j in range(hi - lo):
        slot = j % STAGES
        start = (lo + j) * BLOCK_N
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        for r in gl.static_range(BLOCK_N // CHUNK):
            t = start + r * CHUNK + offs_r
            inside = t < end
            blk = gl.load(BLOCKS + t // BS, mask=inside, other=0).to(gl.int64)
            blk = gl.minimum(gl.maximum(blk, 0), num_blocks - 1)
            row = (t % BS).to(gl.int64)
            k_ptrs = K + k_off + (blk * skn + row * skt)[:, None] + offs_d[None, :]
            v_ptrs = V + v_off + (blk * svn + row * svt)[:, None] + offs_d[None, :]
            async_copy.async_copy_global_to_shared(k_bufs.index(slot).slice(r * CHUNK, CHUNK), k_ptrs,
                                                   mask=inside[:, None])
            async_copy.async_copy_global_to_shared(v_bufs.index(slot).slice(r * CHUNK, CHUNK), v_ptrs,
                                                   mask=inside[:, None])
        async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)


@gluon.jit
def _task_queries(dst, Q, SEQS, hk, G, sqb, sqh, start, n_rows, D: gl.constexpr):
    """Task rows [start, start + dst's rows) into shared memory: row r is query head hk G + r % G
    of sequence SEQS[r // G] (zeros from n_rows on)."""
    R: gl.constexpr = dst.shape[0]
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    rows = start + gl.arange(0, R, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    inside = rows < n_rows
    seq = gl.load(SEQS + rows // G, mask=inside, other=0).to(gl.int64)
    offs = seq * sqb + (hk * G + rows % G).to(gl.int64) * sqh
    dst.store(gl.load(Q + offs[:, None] + offs_d[None, :], mask=inside[:, None], other=0.0))


@gluon.jit
def _chunk_consumer(q_smem, k_bufs, v_bufs, ready, empty, Q, SEQS, hk, G, sqb, sqh, CO, CL, base, n_rows, tok1,
                    qk_scale, start_m, tiles, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr):
    """A consumer warpgroup: its task rows [start_m, start_m + ROWS) into q_smem (_task_queries),
    then flash's _consumer over the work item's key tiles into the units' partials. Gathered
    here rather than before the partitions start, so that the producer's first copies overlap it
    (NVIDIA_H200-decode-sweep.txt 22)."""
    _task_queries(q_smem, Q, SEQS, hk, G, sqb, sqh, start_m, n_rows, D)
    fence_async_shared()
    gl.thread_barrier()  # the warpgroup's (a partition's barrier)
    _consumer(q_smem, k_bufs, v_bufs, ready, empty, CO, CL, CL, base * D, base, D, n_rows, n_rows, tok1, 0, 0,
              qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), 0, start_m, tiles, None, False, False, False, False,
              False, False, BLOCK_N, D, STAGES)


@kernel(inputs=6, outputs=2, gluon=True)
def decode_chunk_hopper_kernel(Q, K, V, WORK, TASK_SEQS, TASK_BLOCKS, Hkv, G, num_blocks, U, qk_scale, sqb, sqh, skn,
                               skt, skh, svn, svt, svh, CO, CL, BLOCK_N: gl.constexpr, D: gl.constexpr,
                               BS: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr,
                               PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """Grid (work items, row tiles, Hkv), 4 warps (the first consumer; 12 in all). Work item w =
    WORK[w] (seq_off, nseq, blk_off, tok0, tok1, unit0), as kernels.decode_chunk_kernel's:
    tokens [tok0, tok1) of its task's blocks (tok0 a multiple of BLOCK_N) against task rows
    [128 r, 128 r + 128) of kv head hk (row p G + g: head g of the task's sequence p). Unit
    unit0 + p's partial for head hk G + g: CO [Hkv, U, G, D] fp32, CL [Hkv, U, G] (natural log)."""
    sqb, sqh, _ = _strides8(sqb, sqh, sqh)
    skn, skt, skh = _strides8(skn, skt, skh)
    svn, svt, svh = _strides8(svn, svt, svh)
    w = gl.program_id(0).to(gl.int64)
    start_m = gl.program_id(1) * (2 * ROWS)
    hk = gl.program_id(2).to(gl.int64)
    seq_off, nseq, blk_off, tok0, tok1, unit0 = work_item(WORK, w)
    n_rows = nseq * G
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_buffers(Q.dtype.element_ty, BLOCK_N, D, STAGES)
    seqs = TASK_SEQS + seq_off
    lo = tok0 // BLOCK_N
    hi = gl.where(start_m < n_rows, gl.cdiv(tok1, BLOCK_N), lo)  # a row tile past the task's: nothing to do
    tiles = (lo, lo, gl.minimum(tok1 // BLOCK_N, hi), hi)  # only a last partial tile masked
    base = (hk * U + unit0) * G  # CO / CL row of task row 0
    gl.warp_specialize([
        (_chunk_consumer, (q0, k_bufs, v_bufs, ready, empty, Q, seqs, hk, G, sqb, sqh, CO, CL, base, n_rows, tok1,
                           qk_scale, start_m, tiles, BLOCK_N, D, STAGES)),
        (_chunk_consumer, (q1, k_bufs, v_bufs, ready, empty, Q, seqs, hk, G, sqb, sqh, CO, CL, base, n_rows, tok1,
                           qk_scale, start_m + ROWS, tiles, BLOCK_N, D, STAGES)),
        (_paged_producer, (k_bufs, v_bufs, ready, empty, K, V, TASK_BLOCKS + blk_off, hk * skh, hk * svh, skn, skt,
                           svn, svt, num_blocks, tiles[0], tiles[3], tok1, BLOCK_N, D, BS, STAGES, CHUNK)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
