"""Row bookkeeping shared by the portable kernels (kernels.py) and the Gluon ones (hopper.py):
a packed sequence's rows from cu_seqlens (flash_attention_varlen), the rows no program's tiles
cover, and the keys a block of query rows sees. Scalar tl code, which Gluon kernels call as well."""

import triton
import triton.language as tl


@triton.jit
def _clamp(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


@triton.jit
def _sequence(CU, b, nseq, N, T):
    """Sequence b of a packed batch, the rows [CU[b], CU[b + 1]) of T: (its first row, its
    rows (at most N: max_seqlen), the row after its last), clamped into [0, T] (in bounds
    whatever CU holds). Slot b = nseq, after the last sequence, has no rows."""
    row0 = _clamp(tl.load(CU + b).to(tl.int32), 0, T)
    end = _clamp(tl.load(CU + b + 1, mask=b < nseq, other=0).to(tl.int32), row0, T)
    return row0, tl.minimum(end - row0, N), end


@triton.jit
def _unwritten(CU, b, nseq, row0, n, T, BLOCK: tl.constexpr):
    """The rows of a packed batch that no program's blocks cover, which a varlen program fills
    (zeros, lse -inf): (lo1, hi1, lo2, hi2, first, step), blocks of BLOCK rows from lo + first to
    hi by step. Slot nseq's programs: the rows before CU[0] and from CU[nseq] on (a padded
    packing), taking every num_programs(0)-th block; a sequence's last block: its rows past
    its first n (one longer than max_seqlen: treated as cut there)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    extra = b == nseq
    last = pid == nprog - 1
    _, _, end = _sequence(CU, b, nseq, T, T)
    lo1 = tl.where(extra, 0, row0 + n)
    hi1 = tl.where(extra, _clamp(tl.load(CU).to(tl.int32), 0, T), tl.where(last, end, 0))
    lo2 = tl.where(extra, row0, 0)
    hi2 = tl.where(extra, T, 0)
    first = tl.where(extra, pid * BLOCK, 0)
    step = tl.where(extra, nprog * BLOCK, BLOCK)
    return lo1, hi1, lo2, hi2, first, step


@triton.jit
def _seen_keys(first, n_rows, q_len, kv_len, lo_shift, hi_shift, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """[lo, hi): the keys that the band and kv_len let some query row of [first, first + n_rows)
    below q_len see (each row's band is an interval one key past the previous row's, so their
    union is one). Scalars: a K / V load masked by them still pipelines, where kernels._seen (a
    reduction over the tile, which a mask or segment ids need) does not. The Gluon kernels zero
    the rows of their shared K / V tiles outside it (hopper._zero_rows_outside)."""
    lo = 0
    hi = kv_len
    if CAUSAL or WINDOW:
        hi = tl.minimum(tl.minimum(first + n_rows, q_len) + hi_shift, kv_len)
    if WINDOW:
        lo = first + lo_shift
    return lo, hi
