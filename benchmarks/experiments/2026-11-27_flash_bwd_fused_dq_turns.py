"""Issue 22: the fused-dQ experiment's turn counts (hopper._turn, plans.HOPPER_FUSED_DQ)
against the tiles its programs visit, in Python, before the kernel runs on a GPU: a wrong count
waits forever there. For every query tile, the key blocks that visit it (hopper._query_tiles,
transcribed: causal or not, windows, q / kv lengths) must be exactly [first, J(i)], each block
j waiting (in each half of the tile's columns) for J(i) - j arrivals; so the turns are 0, 1,
... in order, no two alike, and each wait is met by blocks j' > j only (launched before it).
(Session 37's form counted 128 arrivals a warpgroup, both warpgroups in one order.) Random Nq,
Nk in [1, 1200], causal or not, windows, lengths, plus the edge sizes.

    python benchmarks/experiments/2026-11-27_flash_bwd_fused_dq_turns.py

The fused form is gone from hopper.py since session 38 (measured slower; results README); it runs at commit f7500f4.
"""
import random

ROWS, KEYS = 64, 64


def cdiv(a, b):
    return -(-a // b)


def gl_cdiv(a, b):  # gl.cdiv: (a + b - 1) // b in C division (toward zero)
    n = a + b - 1
    return int(n / b) if n < 0 else n // b


def query_tiles(k0, q_len, kv_len, lo_shift, hi_shift, causal, window, kv_lens):  # hopper._query_tiles
    n_q = cdiv(q_len, ROWS)
    last = k0 + 2 * KEYS - 1
    lo = min(max(k0 - hi_shift, 0) // ROWS, n_q) if causal or window else 0
    hi = cdiv(min(max(last - lo_shift + 1, 0), q_len), ROWS) if window else n_q
    if kv_lens:
        hi = hi if k0 < kv_len else 0
    return lo, max(hi, lo)


def last_block(i, nb, kv_len, hi_shift, causal, window, kv_lens):  # hopper._turn
    nbk = cdiv(kv_len, 2 * KEYS) if kv_lens else nb
    if causal or window:
        return min(gl_cdiv(ROWS * (i + 1) + hi_shift, 2 * KEYS), nbk) - 1
    return nbk - 1


def check(Nq, Nk, causal, window=None, q_len=None, kv_len=None):
    nb = cdiv(Nk, 2 * KEYS)
    kv_lens = kv_len is not None
    q_len = Nq if q_len is None else q_len
    kv_len = Nk if kv_len is None else kv_len
    far = Nq + Nk + 1
    left, right = window if window is not None else (None, None)
    right = 0 if causal else right
    is_window = window is not None and (left is not None or not causal)
    shift = kv_len - q_len
    lo_shift, hi_shift = shift - (far if left is None else left), shift + (far if right is None else right)
    visitors = {}
    for j in range(nb):
        lo, hi = query_tiles(j * 2 * KEYS, q_len, kv_len, lo_shift, hi_shift, causal, is_window, kv_lens)
        for i in range(lo, hi):
            visitors.setdefault(i, []).append(j)
    for i, js in visitors.items():
        J = last_block(i, nb, kv_len, hi_shift, causal, is_window, kv_lens)
        if js != list(range(js[0], J + 1)):
            return f"tile {i}: visited by {js[0]}..{js[-1]} ({len(js)}), J(i) = {J}"
        turns = sorted(J - j for j in js)
        if turns != list(range(len(js))):
            return f"tile {i}: turns {turns[:6]}..."
        # the tile's rows see a key of every visiting block (else a block would add zeros: harmless,
        # but the visit lists say otherwise)
        if causal or is_window:
            last_row = min(ROWS * i + ROWS, q_len) - 1
            if any(j * 2 * KEYS > last_row + hi_shift for j in js):
                return f"tile {i}: a block past the diagonal visits"
    return None


def random_case():
    Nq, Nk = random.randint(1, 1200), random.randint(1, 1200)
    causal = random.random() < 0.5
    window = None
    if random.random() < 0.4:
        window = (random.choice([None, random.randint(0, 500)]), random.choice([None, random.randint(0, 500)]))
    q_len = random.randint(0, Nq) if random.random() < 0.3 else None
    kv_len = random.randint(0, Nk) if random.random() < 0.3 else None
    return Nq, Nk, causal, window, q_len, kv_len


bad = 0
cases = [(n, m, c, None, None, None) for n in (1, 63, 64, 65, 127, 128, 129, 1000)
         for m in (1, 127, 128, 129, 300, 1000) for c in (False, True)]
cases += [random_case() for _ in range(5000)]
for case in cases:
    err = check(*case)
    if err:
        bad += 1
        print("wrong:", case, err)
print(f"{len(cases)} configurations, {bad} wrong")
