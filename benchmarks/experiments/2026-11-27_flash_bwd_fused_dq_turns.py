"""Issue 22: the fused-dQ experiment's turn counts (2026-11-27_flash_bwd_fused_dq.py, _fused_tile)
against the tiles its programs visit, in Python, before the kernel runs on a GPU: a wrong count
waits forever there. For every query tile, the key blocks that visit it (hopper._query_tiles,
transcribed: causal or full, no window or lengths) must be exactly [first, J(i)], each block j's
warpgroup w waiting for 128 (2 (J(i) - j) + w) arrivals; so the turns are 0, 128, ... in
order, no two alike, and each wait is met by blocks j' > j only (launched before it). Random Nq,
Nk in [1, 1200], causal or not, plus the edge sizes.

    python benchmarks/experiments/2026-11-27_flash_bwd_fused_dq_turns.py
"""
import random

ROWS, KEYS = 64, 64


def cdiv(a, b):
    return -(-a // b)


def gl_cdiv(a, b):  # gl.cdiv: (a + b - 1) // b in C division (toward zero)
    n = a + b - 1
    return int(n / b) if n < 0 else n // b


def query_tiles(k0, Nq, hi_shift, causal):  # hopper._query_tiles, no window, no lengths
    n_q = cdiv(Nq, ROWS)
    lo = min(max(k0 - hi_shift, 0) // ROWS, n_q) if causal else 0
    return lo, max(n_q, lo)


def last_block(i, nb, hi_shift, causal):  # _fused_tile's J(i)
    return min(gl_cdiv(ROWS * (i + 1) + hi_shift, 2 * KEYS), nb) - 1 if causal else nb - 1


def check(Nq, Nk, causal):
    nb, hi_shift = cdiv(Nk, 2 * KEYS), Nk - Nq
    visitors = {}
    for j in range(nb):
        lo, hi = query_tiles(j * 2 * KEYS, Nq, hi_shift, causal)
        for i in range(lo, hi):
            visitors.setdefault(i, []).append(j)
    for i, js in visitors.items():
        J = last_block(i, nb, hi_shift, causal)
        if js != list(range(js[0], J + 1)):
            return f"tile {i}: visited by {js[0]}..{js[-1]} ({len(js)}), J(i) = {J}"
        turns = sorted(128 * (2 * (J - j) + w) for j in js for w in (0, 1))
        if turns != [128 * t for t in range(2 * len(js))]:
            return f"tile {i}: turns {turns[:6]}..."
        # the tile's rows see a key of every visiting block (else a block would add zeros: harmless,
        # but the visit lists say otherwise)
        if causal:
            last_row = min(ROWS * i + ROWS, Nq) - 1
            if any(j * 2 * KEYS > last_row + hi_shift for j in js):
                return f"tile {i}: a block past the diagonal visits"
    return None


bad = 0
cases = [(n, m, c) for n in (1, 63, 64, 65, 127, 128, 129, 1000) for m in (1, 127, 128, 129, 300, 1000)
         for c in (False, True)]
cases += [(random.randint(1, 1200), random.randint(1, 1200), random.random() < 0.5) for _ in range(3000)]
for Nq, Nk, causal in cases:
    err = check(Nq, Nk, causal)
    if err:
        bad += 1
        print("wrong:", Nq, Nk, causal, err)
print(f"{len(cases)} configurations, {bad} wrong")
