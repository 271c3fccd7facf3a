"""Where the Gluon chunk-first decode kernel's time goes (session 56; results:
NVIDIA_H200-decode-sweep.txt 22): copies of decode/hopper.py's decode_chunk_hopper_kernel that
write %globaltimer stamps per program (start; query rows gathered; the first K / V tile ready,
seen by consumer 0; each consumer's end; the producer's last copy issued), optionally %clock64
stamps per key tile (TILE_STAMPS: data ready and step done in each consumer, slot free and
copies issued in the producer), and forms of it:
  Q_IN False: the query rows gathered before the partitions start (the tree before session 56);
  Q_IN: each consumer gathers its own (the tree since);
  ROWS_FIRST: a work item's two row tiles launched side by side;
  PREFETCH: the producer loads the next tile's block ids before awaiting this tile's slot;
  TMA: K / V by TMA, boxes of min(BLOCK_N, block_size) rows of one block (descriptors made in the
    kernel; DESC_IN_PRODUCER: by the producer partition);
  BLOCK_N 128, STAGES, registers.
On the shared-prefix bench batch: CUPTI device time of each form beside the tree's kernel, their
outputs against the tree's (the TILE_STAMPS consumer is a rewrite of flash's: not bit-equal), and
the stamps' spread over programs (us from the earliest start).

Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_chunk_timeline.py
[--only NAME|NAME] (forms whose names hold one of them; each form compiles in 20-40 s; --compile:
compile the forms for sm_90 on a machine without a GPU).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier  # noqa: E402

from ato_core.ops.decode import plans  # noqa: E402
from ato_core.ops.decode.hopper import _paged_producer, _task_queries  # noqa: E402
from ato_core.ops.decode.kernels import work_item  # noqa: E402
from ato_core.ops.flash_attention.hopper import (LN2, ROWS, _consumer, _forward_buffers, _softmax, _step,  # noqa: E402
                                                 _strides8)
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, tma, warpgroup_mma,  # noqa: E402
                                                              warpgroup_mma_wait)

# per program: %globaltimer at 0 start, 1 q in smem, 2 first tile ready, 3 consumer 0 end, 4 consumer 1 end,
# 5 producer end; %clock64 (TILE_STAMPS form) at 8 + 2 j / 9 + 2 j (consumer 0: tile j's data ready / its step
# done), 40 + .. (consumer 1), 72 + 2 j / 73 + 2 j (producer: tile j's slot free / its copies issued)
STAMPS = 104


@gluon.jit
def _stamp(TIMES, pid, col, CLOCK: gl.constexpr = False):
    """TIMES[pid, col] = %globaltimer (ns), or with CLOCK the SM's %clock64 (cycles)."""
    if CLOCK:
        t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    else:
        t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(TIMES + pid * 104 + col, t)


@gluon.jit
def _tick(TIMES, pid, col):
    _stamp(TIMES, pid, col, True)


@gluon.jit
def _stamped_consumer(TIMES, pid, OFF: gl.constexpr, q_smem, k_bufs, v_bufs, ready, empty, CO, CL, base, n_rows,
                      tok1, qk_scale, start_m, tiles, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr):
    """_consumer's work for decode's chunk (full tiles, no option), each tile's data-ready and step-done
    clocks stamped at TIMES[OFF + 2 j], [OFF + 2 j + 1]."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    offs_m = start_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    offs_sn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([ROWS], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, D], gl.float32, o_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    alibi = (offs_m.to(gl.float32), 0.0, offs_sn.to(gl.float32) * 0.0, (0.0, 0.0), 0, CO, 0)
    lo = tiles[0]
    n = tiles[3] - lo
    mbarrier.wait(ready.index(0), 0)
    _tick(TIMES, pid, OFF)
    fence_async_shared()
    s_tok = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, lo * BLOCK_N, offs_sn, tok1, 0, 0, alibi, 0, False,
                                  False, True, False, False, False)
    _tick(TIMES, pid, OFF + 1)
    for j in range(1, n):
        mbarrier.wait(ready.index(j % STAGES), (j // STAGES) & 1)
        _tick(TIMES, pid, OFF + 2 * j)
        p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, j, (lo + j) * BLOCK_N, p, m_i, l_i, acc, s_zero,
                                 qk_scale, offs_m, offs_sn, tok1, 0, 0, alibi, p_layout, o_layout, False, False, False,
                                 False, False, False, STAGES)
        _tick(TIMES, pid, OFF + 2 * j + 1)
    last = (n - 1) % STAGES
    o_tok = warpgroup_mma(gl.convert_layout(p.to(v_bufs.dtype), p_layout), v_bufs.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(empty.index(last), count=1)
    empty_row = l_i == 0.0
    l_safe = gl.where(empty_row, 1.0, l_i)
    acc = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    offs_om = start_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    offs_od = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    gl.store(CO + base * D + offs_om.to(gl.int64)[:, None] * D + offs_od[None, :], acc,
             mask=(offs_om < n_rows)[:, None])
    lse2 = m_i * qk_scale + gl.log2(l_safe)
    gl.store(CL + base + offs_m, gl.where(empty_row, float("-inf"), lse2 * LN2), mask=offs_m < n_rows)


@gluon.jit
def _stamped_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt,
                      num_blocks, lo, hi, end, BLOCK_N: gl.constexpr, D: gl.constexpr, BS: gl.constexpr,
                      STAGES: gl.constexpr, CHUNK: gl.constexpr):
    """_paged_producer with each tile's slot-free and copies-issued clocks stamped."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for j in range(hi - lo):
        slot = j % STAGES
        start = (lo + j) * BLOCK_N
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        _tick(TIMES, pid, 72 + 2 * j)
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
        _tick(TIMES, pid, 73 + 2 * j)
    _stamp(TIMES, pid, 5)


@gluon.jit
def _timed_consumer(TIMES, pid, col: gl.constexpr, q_smem, k_bufs, v_bufs, ready, empty, CO, CL, base, n_rows, tok1,
                    qk_scale, start_m, tiles, Q, seqs, hk, G, sqb, sqh, BLOCK_N: gl.constexpr, D: gl.constexpr,
                    STAGES: gl.constexpr, Q_IN: gl.constexpr, TILE_STAMPS: gl.constexpr):
    if Q_IN:  # this consumer's query rows, gathered here while the producer copies
        _task_queries(q_smem, Q, seqs, hk, G, sqb, sqh, start_m, n_rows, D)
        fence_async_shared()
        gl.thread_barrier()
        if col == 3:
            _stamp(TIMES, pid, 1)
    if col == 3:
        if tiles[3] > tiles[0]:
            mbarrier.wait(ready.index(0), 0)
        _stamp(TIMES, pid, 2)
    if TILE_STAMPS:
        _stamped_consumer(TIMES, pid, 8 + 32 * (col - 3), q_smem, k_bufs, v_bufs, ready, empty, CO, CL, base, n_rows,
                          tok1, qk_scale, start_m, tiles, BLOCK_N, D, STAGES)
    else:
        _consumer(q_smem, k_bufs, v_bufs, ready, empty, CO, CL, CL, base * D, base, D, n_rows, n_rows, tok1, 0, 0,
                  qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), 0, start_m, tiles, None, False, False, False, False,
                  False, False, BLOCK_N, D, STAGES)
    _stamp(TIMES, pid, col)


@gluon.jit
def _half_ids(BLOCKS, t, end, BS: gl.constexpr, num_blocks):
    """The block ids of token rows t (0 from end on), clamped into the cache."""
    blk = gl.load(BLOCKS + t // BS, mask=t < end, other=0)
    return gl.minimum(gl.maximum(blk, 0), num_blocks - 1)


@gluon.jit
def _copy_half(k_buf, v_buf, K, V, k_off, v_off, skn, skt, svn, svt, blk, t, end, offs_d, BS: gl.constexpr):
    blk = blk.to(gl.int64)
    row = (t % BS).to(gl.int64)
    inside = (t < end)[:, None]
    async_copy.async_copy_global_to_shared(k_buf, K + k_off + (blk * skn + row * skt)[:, None] + offs_d[None, :],
                                           mask=inside)
    async_copy.async_copy_global_to_shared(v_buf, V + v_off + (blk * svn + row * svt)[:, None] + offs_d[None, :],
                                           mask=inside)


@gluon.jit
def _prefetch_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt,
                       num_blocks, lo, hi, end, BLOCK_N: gl.constexpr, D: gl.constexpr, BS: gl.constexpr,
                       STAGES: gl.constexpr, STAMP: gl.constexpr):
    """_paged_producer with the next tile's block ids loaded before this tile's slot is awaited, and
    each tile copied in halves of 64 rows (BLOCK_N 64 or 128) with their ids loaded first."""
    H: gl.constexpr = 64
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, H, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    t0 = lo * BLOCK_N + offs_r
    b0 = _half_ids(BLOCKS, t0, end, BS, num_blocks)
    b1 = b0
    if BLOCK_N == 128:
        b1 = _half_ids(BLOCKS, t0 + H, end, BS, num_blocks)
    for j in range(hi - lo):
        slot = j % STAGES
        start = (lo + j) * BLOCK_N
        n0 = _half_ids(BLOCKS, start + BLOCK_N + offs_r, end, BS, num_blocks)
        n1 = n0
        if BLOCK_N == 128:
            n1 = _half_ids(BLOCKS, start + BLOCK_N + H + offs_r, end, BS, num_blocks)
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        if STAMP:
            _tick(TIMES, pid, 72 + 2 * j)
        _copy_half(k_bufs.index(slot).slice(0, H), v_bufs.index(slot).slice(0, H), K, V, k_off, v_off, skn, skt, svn,
                   svt, b0, start + offs_r, end, offs_d, BS)
        if BLOCK_N == 128:
            _copy_half(k_bufs.index(slot).slice(H, H), v_bufs.index(slot).slice(H, H), K, V, k_off, v_off, skn, skt,
                       svn, svt, b1, start + H + offs_r, end, offs_d, BS)
        async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)
        if STAMP:
            _tick(TIMES, pid, 73 + 2 * j)
        b0 = n0
        b1 = n1
    _stamp(TIMES, pid, 5)


@gluon.constexpr_function
def _box_rows(block_n, bs):
    return min(block_n, bs)


@gluon.jit
def _box_id(BLOCKS, t, end, BS: gl.constexpr, num_blocks):
    """The block of token t (num_blocks, past the cache: TMA fills the box with zeros, from end on)."""
    blk = gl.load(BLOCKS + t // BS, mask=t < end, other=0)
    return gl.where(t < end, gl.minimum(gl.maximum(blk, 0), num_blocks - 1), num_blocks)


@gluon.jit
def _box_ids(BLOCKS, start, end, BS: gl.constexpr, R: gl.constexpr, C: gl.constexpr, num_blocks):
    """The blocks of a tile's C boxes of R rows from token start (4 at most; unused ones repeat the first)."""
    i0 = _box_id(BLOCKS, start, end, BS, num_blocks)
    i1 = i0
    i2 = i0
    i3 = i0
    if C > 1:
        i1 = _box_id(BLOCKS, start + R, end, BS, num_blocks)
    if C > 2:
        i2 = _box_id(BLOCKS, start + 2 * R, end, BS, num_blocks)
        i3 = _box_id(BLOCKS, start + 3 * R, end, BS, num_blocks)
    return i0, i1, i2, i3


@gluon.jit
def _box_copy(k_desc, v_desc, bar, kb, vb, blk, hk, t, i: gl.constexpr, R: gl.constexpr, BS: gl.constexpr):
    tma.async_copy_global_to_shared(k_desc, [blk, hk, t % BS, 0], bar, kb.slice(i * R, R, dim=2))
    tma.async_copy_global_to_shared(v_desc, [blk, hk, t % BS, 0], bar, vb.slice(i * R, R, dim=2))


@gluon.jit
def _tma_paged_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, k_desc, v_desc, BLOCKS, hk, num_blocks, lo, hi,
                        end, BLOCK_N: gl.constexpr, D: gl.constexpr, BS: gl.constexpr, STAGES: gl.constexpr,
                        STAMP: gl.constexpr, caches=None):
    """K / V tiles by TMA: boxes of R = min(BLOCK_N, BS) rows of one block and kv head each (a box
    from end on reads past the cache: zeros), the next tile's block ids loaded before this one's
    slot is awaited. caches = (K, V, Hkv, skn, skh, skt, svn, svh, svt): the descriptors made here."""
    R: gl.constexpr = _box_rows(BLOCK_N, BS)
    C: gl.constexpr = BLOCK_N // R
    if caches is not None:
        k_desc = _paged_descriptor(caches[0], num_blocks, caches[2], caches[3], caches[4], caches[5], R, BS, D)
        v_desc = _paged_descriptor(caches[1], num_blocks, caches[2], caches[6], caches[7], caches[8], R, BS, D)
    ids = _box_ids(BLOCKS, lo * BLOCK_N, end, BS, R, C, num_blocks)
    for j in range(hi - lo):
        slot = j % STAGES
        start = (lo + j) * BLOCK_N
        nxt = _box_ids(BLOCKS, start + BLOCK_N, end, BS, R, C, num_blocks)
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        if STAMP:
            _tick(TIMES, pid, 72 + 2 * j)
        bar = ready.index(slot)
        mbarrier.expect(bar, 2 * k_desc.block_type.nbytes * C)
        kb = k_bufs.index(slot).reshape([1, 1, BLOCK_N, D])
        vb = v_bufs.index(slot).reshape([1, 1, BLOCK_N, D])
        _box_copy(k_desc, v_desc, bar, kb, vb, ids[0], hk, start, 0, R, BS)
        if C > 1:
            _box_copy(k_desc, v_desc, bar, kb, vb, ids[1], hk, start + R, 1, R, BS)
        if C > 2:
            _box_copy(k_desc, v_desc, bar, kb, vb, ids[2], hk, start + 2 * R, 2, R, BS)
            _box_copy(k_desc, v_desc, bar, kb, vb, ids[3], hk, start + 3 * R, 3, R, BS)
        if STAMP:
            _tick(TIMES, pid, 73 + 2 * j)
        ids = nxt
    _stamp(TIMES, pid, 5)


@gluon.jit
def _paged_descriptor(A, num_blocks, Hkv, sn, sh, st, R: gl.constexpr, BS: gl.constexpr, D: gl.constexpr):
    """A TMA descriptor of [1, 1, R, D] boxes over a paged cache as [num_blocks, Hkv, BS, D]."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, 1, R, D], A.dtype.element_ty)
    return tma.make_tensor_descriptor(A, [num_blocks, Hkv, BS, D], [sn, sh, st, 1], [1, 1, R, D], layout)


@gluon.jit
def _timed_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, BLOCKS, hk, Hkv, skn, skt, skh, svn, svt, svh,
                    num_blocks, lo, hi, end, BLOCK_N: gl.constexpr, D: gl.constexpr, BS: gl.constexpr,
                    STAGES: gl.constexpr, CHUNK: gl.constexpr, TILE_STAMPS: gl.constexpr, PREFETCH: gl.constexpr,
                    TMA: gl.constexpr, DESC_IN_PRODUCER: gl.constexpr, descs):
    """The producer of a form: by TMA (descs: the descriptors; DESC_IN_PRODUCER: made here), with the block
    ids a tile ahead (PREFETCH), stamped (TILE_STAMPS), or decode's _paged_producer; then its end stamp."""
    if TMA:
        if DESC_IN_PRODUCER:
            _tma_paged_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, None, None, BLOCKS, hk.to(gl.int32),
                                num_blocks, lo, hi, end, BLOCK_N, D, BS, STAGES, TILE_STAMPS,
                                (K, V, Hkv, skn, skh, skt, svn, svh, svt))
        else:
            _tma_paged_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, descs[0], descs[1], BLOCKS, hk.to(gl.int32),
                                num_blocks, lo, hi, end, BLOCK_N, D, BS, STAGES, TILE_STAMPS)
        return
    k_off = hk * skh
    v_off = hk * svh
    if PREFETCH:
        _prefetch_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt,
                           num_blocks, lo, hi, end, BLOCK_N, D, BS, STAGES, TILE_STAMPS)
        return
    if TILE_STAMPS:
        _stamped_producer(TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt,
                          num_blocks, lo, hi, end, BLOCK_N, D, BS, STAGES, CHUNK)
        return
    _paged_producer(k_bufs, v_bufs, ready, empty, K, V, BLOCKS, k_off, v_off, skn, skt, svn, svt, num_blocks, lo, hi,
                    end, BLOCK_N, D, BS, STAGES, CHUNK)
    _stamp(TIMES, pid, 5)


@gluon.jit
def chunk_timed_kernel(Q, K, V, WORK, TASK_SEQS, TASK_BLOCKS, Hkv, G, num_blocks, U, qk_scale, sqb, sqh, skn,
                       skt, skh, svn, svt, svh, CO, CL, TIMES, BLOCK_N: gl.constexpr, D: gl.constexpr,
                       BS: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                       CONSUMER_REGS: gl.constexpr, Q_IN: gl.constexpr, ROWS_FIRST: gl.constexpr = False,
                       TILE_STAMPS: gl.constexpr = False, PREFETCH: gl.constexpr = False,
                       TMA: gl.constexpr = False, DESC_IN_PRODUCER: gl.constexpr = False):
    """decode_chunk_hopper_kernel with stamps; Q_IN: the query rows gathered in the consumers;
    ROWS_FIRST: grid (row tiles, work items, Hkv), a work item's row tiles launched side by side."""
    pid = (gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0) + gl.program_id(0)
    _stamp(TIMES, pid, 0)
    sqb, sqh, _ = _strides8(sqb, sqh, sqh)
    skn, skt, skh = _strides8(skn, skt, skh)
    svn, svt, svh = _strides8(svn, svt, svh)
    if ROWS_FIRST:
        w = gl.program_id(1).to(gl.int64)
        start_m = gl.program_id(0) * (2 * ROWS)
    else:
        w = gl.program_id(0).to(gl.int64)
        start_m = gl.program_id(1) * (2 * ROWS)
    hk = gl.program_id(2).to(gl.int64)
    seq_off, nseq, blk_off, tok0, tok1, unit0 = work_item(WORK, w)
    n_rows = nseq * G
    # the ready barriers: an arrival from each cp.async thread, or TMA's one (with the bytes expected)
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_buffers(Q.dtype.element_ty, BLOCK_N, D, STAGES,
                                                            1 if TMA else 128)
    seqs = TASK_SEQS + seq_off
    if not Q_IN:
        _task_queries(q0, Q, seqs, hk, G, sqb, sqh, start_m, n_rows, D)
        _task_queries(q1, Q, seqs, hk, G, sqb, sqh, start_m + ROWS, n_rows, D)
        fence_async_shared()
        gl.thread_barrier()
        _stamp(TIMES, pid, 1)
    lo = tok0 // BLOCK_N
    hi = gl.where(start_m < n_rows, gl.cdiv(tok1, BLOCK_N), lo)
    tiles = (lo, lo, gl.minimum(tok1 // BLOCK_N, hi), hi)
    base = (hk * U + unit0) * G
    descs = (K, V)  # TMA: the descriptors made here, else (DESC_IN_PRODUCER, or no TMA) unused
    if TMA and not DESC_IN_PRODUCER:
        R: gl.constexpr = _box_rows(BLOCK_N, BS)
        descs = (_paged_descriptor(K, num_blocks, Hkv, skn, skh, skt, R, BS, D),
                 _paged_descriptor(V, num_blocks, Hkv, svn, svh, svt, R, BS, D))
    gl.warp_specialize([
        (_timed_consumer, (TIMES, pid, 3, q0, k_bufs, v_bufs, ready, empty, CO, CL, base, n_rows, tok1, qk_scale,
                           start_m, tiles, Q, seqs, hk, G, sqb, sqh, BLOCK_N, D, STAGES, Q_IN, TILE_STAMPS)),
        (_timed_consumer, (TIMES, pid, 4, q1, k_bufs, v_bufs, ready, empty, CO, CL, base, n_rows, tok1, qk_scale,
                           start_m + ROWS, tiles, Q, seqs, hk, G, sqb, sqh, BLOCK_N, D, STAGES, Q_IN,
                           TILE_STAMPS)),
        (_timed_producer, (TIMES, pid, k_bufs, v_bufs, ready, empty, K, V, TASK_BLOCKS + blk_off, hk, Hkv, skn, skt,
                           skh, svn, svt, svh, num_blocks, tiles[0], tiles[3], tok1, BLOCK_N, D, BS, STAGES, CHUNK,
                           TILE_STAMPS, PREFETCH, TMA, DESC_IN_PRODUCER, descs)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])

FORMS = {"q gathered before the partitions": {"Q_IN": False}, "q in the consumers (the tree)": {"Q_IN": True},
         "q in the consumers, each tile stamped (clock64)": {"Q_IN": True, "TILE_STAMPS": True},
         "q in the consumers, row tiles side by side": {"Q_IN": True, "ROWS_FIRST": True},
         "q in the consumers, block ids a tile ahead": {"Q_IN": True, "PREFETCH": True},
         "block ids ahead, 128-token tiles 3 deep": {"Q_IN": True, "PREFETCH": True, "BLOCK_N": 128, "STAGES": 3},
         "block ids ahead, 128-token tiles 3 deep, registers 232 / 48": {"Q_IN": True, "PREFETCH": True,
                                                                       "BLOCK_N": 128, "STAGES": 3,
                                                                       "CONSUMER_REGS": 232, "PRODUCER_REGS": 48},
         "block ids ahead, 128-token tiles 2 deep": {"Q_IN": True, "PREFETCH": True, "BLOCK_N": 128, "STAGES": 2},
         "q in the consumers, K / V by TMA": {"Q_IN": True, "TMA": True},
         "TMA, each tile stamped": {"Q_IN": True, "TMA": True, "TILE_STAMPS": True},
         "TMA, 6 deep": {"Q_IN": True, "TMA": True, "STAGES": 6},
         "TMA made by the producer": {"Q_IN": True, "TMA": True, "DESC_IN_PRODUCER": True},
         "TMA made by the producer, each tile stamped": {"Q_IN": True, "TMA": True, "DESC_IN_PRODUCER": True,
                                                         "TILE_STAMPS": True},
         "TMA made by the producer, 128-token tiles 3 deep": {"Q_IN": True, "TMA": True, "DESC_IN_PRODUCER": True,
                                                              "BLOCK_N": 128, "STAGES": 3, "CONSUMER_REGS": 240,
                                                              "PRODUCER_REGS": 32},
         "TMA, 128-token tiles 3 deep": {"Q_IN": True, "TMA": True, "BLOCK_N": 128, "STAGES": 3,
                                         "CONSUMER_REGS": 240, "PRODUCER_REGS": 32},
         "TMA, 128-token tiles 2 deep": {"Q_IN": True, "TMA": True, "BLOCK_N": 128, "STAGES": 2,
                                         "CONSUMER_REGS": 240, "PRODUCER_REGS": 32}}


def compile_forms():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from ato_core.launch import constexpr_defaults

    names = [p.name for p in chunk_timed_kernel.params]
    defaults = constexpr_defaults(chunk_timed_kernel)
    constexpr_names = {p.name for p in chunk_timed_kernel.params if p.is_constexpr}
    types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "WORK": "*i32", "TASK_SEQS": "*i32", "TASK_BLOCKS": "*i32",
             "CO": "*fp32", "CL": "*fp32", "TIMES": "*i64", "qk_scale": "fp32"}
    sig = {n: "constexpr" if n in constexpr_names else types.get(n, "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n].startswith("*")}
    for form, ce in FORMS.items():
        # every constexpr given, defaults too: Triton's source hash joins the constants' values
        # without their names, so two forms each setting a different flag would share a binary
        constexprs = {**defaults, "D": 128, "BS": 16, **plans.HOPPER_CHUNK, **ce}
        src = GluonASTSource(fn=chunk_timed_kernel, signature=sig, constexprs=constexprs, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        ptx = k.asm["ptx"]
        print(f"{form}: compiled, {ptx.count('globaltimer')} timer reads, {ptx.count('bar.sync')} bar.sync, "
              f"smem {k.metadata.shared} B")


def run():
    import numpy as np
    import torch

    import ato_torch
    from ato_cli import bench
    from ato_core.ops.decode import hopper
    from ato_core.ops.flash_attention.plans import LOG2E

    import triton
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    (B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = bench.shared_prefix_batch()
    sched = ato_torch.decode_schedule(table, lens, block_size=BS)
    work, task_seqs, task_blocks, unit_seq = sched[:4]
    G, W, U, NB = Hq // Hkv, work.shape[0], unit_seq.shape[0], kc.shape[0]
    rows = task_seqs.shape[0] * G
    grid = (W, -(-rows // 128), Hkv)
    programs = grid[0] * grid[1] * grid[2]
    scalars = (Hkv, G, NB, U, D ** -0.5 * LOG2E, *q.stride()[:2], *kc.stride()[:3], *vc.stride()[:3])
    ce = {"D": D, "BS": BS, **plans.HOPPER_CHUNK}

    def outputs():
        return (torch.empty(Hkv, U, G, D, device="cuda", dtype=torch.float32),
                torch.empty(Hkv, U, G, device="cuda", dtype=torch.float32))

    ref = outputs()

    def tree():
        hopper.decode_chunk_hopper_kernel[grid](q, kc, vc, work, task_seqs, task_blocks, *scalars, *ref, **ce,
                                                num_warps=4)
        return ref

    print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; "
          f"chunk grid {grid} ({programs} programs)")
    per = bench.device_kernels(tree, lambda o: torch.cuda.synchronize(), calls=50)
    print(f"tree kernel: {sum(us for _, us in per.values()):.1f} us device")
    only = sys.argv[sys.argv.index("--only") + 1].split("|") if "--only" in sys.argv else None
    for form, extra in FORMS.items():
        if only and not any(o in form for o in only):
            continue
        out = outputs()
        times = torch.zeros(programs, STAMPS, device="cuda", dtype=torch.int64)

        g = (grid[1], grid[0], grid[2]) if extra.get("ROWS_FIRST") else grid

        def call():
            chunk_timed_kernel[g](q, kc, vc, work, task_seqs, task_blocks, *scalars, *out, times, **{**ce, **extra},
                                     num_warps=4)
            return out
        per = bench.device_kernels(call, lambda o: torch.cuda.synchronize(), calls=50)
        same = all(torch.equal(a, b) for a, b in zip(out, ref))
        call()
        torch.cuda.synchronize()
        clocks = times.cpu().numpy()[:, 8:].astype(np.float64)
        t = times.cpu().numpy()[:, :8].astype(np.float64) / 1e3  # us
        t -= t[:, 0].min()
        cols = {"start": t[:, 0], "q in smem": t[:, 1], "first tile ready": t[:, 2], "consumer 0 end": t[:, 3],
                "consumer 1 end": t[:, 4], "producer end": t[:, 5]}
        print(f"{form}: {sum(us for _, us in per.values()):.1f} us device; outputs bit-equal to the tree's: {same}")
        for name, c in cols.items():
            print(f"   {name:18s} min {c.min():6.2f}  median {np.median(c):6.2f}  max {c.max():6.2f}")
        for name, c in (("q gather", t[:, 1] - t[:, 0]), ("to first tile", t[:, 2] - t[:, 0]),
                        ("tiles (first ready -> consumer 0 end)", t[:, 3] - t[:, 2]),
                        ("whole program", t[:, 3:5].max(1) - t[:, 0])):
            print(f"   per program, {name}: median {np.median(c):6.2f}  max {c.max():6.2f}")
        if extra.get("TILE_STAMPS"):
            n = 512 // extra.get("BLOCK_N", plans.HOPPER_CHUNK["BLOCK_N"])
            print("   clock64 cycles, median over programs, relative to consumer 0's first tile ready:")
            base = clocks[:, 0:1]
            for name, off in (("consumer 0", 0), ("consumer 1", 32)):
                ready = [np.median(clocks[:, off + 2 * j] - base[:, 0]) for j in range(n)]
                done = [np.median(clocks[:, off + 2 * j + 1] - base[:, 0]) for j in range(n)]
                print(f"   {name} data ready: " + " ".join(f"{x:7.0f}" for x in ready))
                print(f"   {name} step done:  " + " ".join(f"{x:7.0f}" for x in done))
            free = [np.median(clocks[:, 64 + 2 * j] - base[:, 0]) for j in range(n)]
            issued = [np.median(clocks[:, 65 + 2 * j] - base[:, 0]) for j in range(n)]
            print("   producer slot free:  " + " ".join(f"{x:7.0f}" for x in free))
            print("   producer issued:     " + " ".join(f"{x:7.0f}" for x in issued))


if __name__ == "__main__":
    if "--compile" in sys.argv:
        compile_forms()
    else:
        run()
