"""Issue 22: hopper._query_tiles' formulas (the query tiles a dK / dV program visits, masked and
unmasked) against brute force, written on the CPU machine before the kernel ever ran: a Python
transcription of the Gluon function (keep the two alike), random Nq, Nk, lengths, causal and
windows. Every visible (query, key) pair's tile must be visited; an unmasked tile's rows before
q_len must see every key of the block before Nk, and none of its keys may lie in [kv_len, Nk)
(their dK / dV are stored). Session 36: 0 of 3000 configurations wrong.

    python benchmarks/experiments/2026-11-27_flash_gluon_bwd_ranges.py
"""
import random

ROWS = 64
def cdiv(a, b): return -(-a // b)
def query_tiles(k0, q_len, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, KV_LENS, BLOCK_K=128):
    n_q = cdiv(q_len, ROWS); last = k0 + BLOCK_K - 1
    lo = 0; full_lo = 0
    if CAUSAL or WINDOW:
        lo = min(max(k0 - hi_shift, 0) // ROWS, n_q)
        full_lo = cdiv(max(last - hi_shift, 0), ROWS)
    hi = n_q; full_hi = n_q
    if WINDOW:
        hi = cdiv(min(max(last - lo_shift + 1, 0), q_len), ROWS)
        full_hi = max(k0 - lo_shift + 1, 0) // ROWS
    if KV_LENS:
        hi = hi if k0 < kv_len else 0
        full_hi = full_hi if last < kv_len else 0
    hi = max(hi, lo); full_lo = min(max(full_lo, lo), hi); full_hi = min(max(full_hi, full_lo), hi)
    return lo, full_lo, full_hi, hi
bad = 0
for trial in range(3000):
    Nq, Nk = random.randint(1, 400), random.randint(1, 400)
    causal = random.random() < 0.5; window = random.random() < 0.5; kvl = random.random() < 0.5; ql = random.random() < 0.5
    q_len = random.randint(0, Nq) if ql else Nq
    kv_len = random.randint(0, Nk) if kvl else Nk
    far = Nq + Nk + 1
    left = random.choice([None, random.randint(0, 200)]) if window else None
    right = 0 if causal else (random.choice([None, random.randint(0, 200)]) if window else None)
    left_s = far if left is None else left; right_s = far if right is None else right
    W = window and (left is not None or not causal)
    shift = kv_len - q_len; lo_s = shift - left_s; hi_s = shift + right_s
    def vis(i, j):
        if j >= kv_len or i >= q_len: return False
        if causal or W:
            if j > i + hi_s: return False
        if W and j < i + lo_s: return False
        return True
    for k0 in range(0, Nk, 128):
        lo, flo, fhi, hi = query_tiles(k0, q_len, kv_len, lo_s, hi_s, causal, W, kvl)
        keys = range(k0, min(k0 + 128, Nk))
        for t in range(cdiv(Nq, ROWS)):
            rows = range(t * ROWS, min(t * ROWS + ROWS, Nq))
            anyv = any(vis(i, j) for i in rows for j in keys)
            if anyv and not (lo <= t < hi):
                bad += 1; print("missed", Nq, Nk, q_len, kv_len, causal, W, left, right, k0, t, (lo, flo, fhi, hi)); break
            if flo <= t < fhi:
                ok = all(vis(i, j) for i in rows if i < q_len for j in keys if j < Nk) and all(j < kv_len for j in keys)
                if not ok:
                    bad += 1; print("unmasked wrong", Nq, Nk, q_len, kv_len, causal, W, left, right, k0, t, (lo, flo, fhi, hi)); break
print("bad", bad)
