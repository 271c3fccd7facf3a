"""decode_schedule: the shared-prefix (chunk-first) schedule of a batch layout, built on the host.

The full blocks of each sequence (positions j < seq_len // block_size) form a path in a trie
keyed by (parent, physical block id); a trie node that two or more sequences pass through is a
block they share at the same position. A chain of shared nodes with one set of sequences is a
task: its blocks are read once per kv head, against all its sequences' query heads as one tile
(decode_chunk_kernel), in token splits of CHUNK_TOKENS; each (split, sequence) of a task is a
"unit" whose partial (o, lse) per query head the combine merges with the sequence's own
(seq-first) part, which starts after its shared blocks. Shared nodes form a prefix of every
path (a child's sequences are a subset of its parent's), so the seq-first part is a suffix.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Tokens of a task per program (a multiple of the kernels' token tile; 512 the fastest on an H100:
# results/NVIDIA_H100_80GB_HBM3-decode-sweep.txt 7a).
CHUNK_TOKENS = 512


class DecodeSchedule(NamedTuple):
    """Arrays (int32) that decode_attention(schedule=...) takes; a pytree of arrays, so it can be
    passed into jax.jit. Sizes are read off their shapes.

    work [W, 6]: per program of the chunk kernel (seq_off, nseq, blk_off, tok0, tok1, unit0):
      its task's sequences task_seqs[seq_off: seq_off + nseq], its blocks from task_blocks[blk_off],
      its tokens [tok0, tok1) of the task, its first unit.
    task_seqs, task_blocks: the tasks' sequences and physical blocks, concatenated.
    unit_seq [U]: the sequence of each unit (a task split's sequence).
    seq_units [B, DEPTH]: each sequence's units, -1 past its last.
    seq_start [B]: where each sequence's own (seq-first) tokens start.
    """

    work: object
    task_seqs: object
    task_blocks: object
    unit_seq: object
    seq_units: object
    seq_start: object


def decode_schedule(block_table, seq_lens, *, block_size: int, chunk_tokens: int = CHUNK_TOKENS) -> DecodeSchedule:
    """The schedule of a batch layout (NumPy int32 arrays; host values of block_table [B,
    max_blocks] and seq_lens [B], any array type). ``block_size``: the cache's (only blocks that
    every sharer uses whole are shared)."""
    table = np.asarray(block_table)
    lens = np.asarray(seq_lens).astype(np.int64)
    if table.ndim != 2 or lens.shape != (table.shape[0],):
        raise ValueError(f"block_table, seq_lens: expected [B, max_blocks] and [B], got {table.shape} and {lens.shape}")
    if block_size not in (16, 32, 64, 128, 256):
        raise ValueError(f"block_size: expected a power of two from 16 to 256, got {block_size}")
    if chunk_tokens % 64 or chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens: expected a positive multiple of 64, got {chunk_tokens}")
    B = table.shape[0]
    nfull = np.minimum(lens // block_size, table.shape[1])
    children, seqs, parent = {}, [], []
    paths = []
    for b in range(B):
        node, path = -1, []
        for j in range(int(nfull[b])):
            key = (node, int(table[b, j]))
            if key not in children:
                children[key] = len(seqs)
                seqs.append([])
                parent.append(node)
            node = children[key]
            seqs[node].append(b)
            path.append(node)
        paths.append(path)
    # tasks: chains of shared nodes with one set of sequences
    run_of, runs = {}, []
    for node in range(len(seqs)):  # parents are numbered before their children
        if len(seqs[node]) < 2:
            continue
        p = parent[node]
        if p >= 0 and len(seqs[p]) == len(seqs[node]):
            run_of[node] = run_of[p]
        else:
            run_of[node] = len(runs)
            runs.append((seqs[node], []))
        runs[run_of[node]][1].append(node)
    block_of = {v: k[1] for k, v in children.items()}
    work, task_seqs, task_blocks, unit_seq = [], [], [], []
    units = [[] for _ in range(B)]
    for sq, nodes in runs:
        seq_off, blk_off = len(task_seqs), len(task_blocks)
        task_seqs += sq
        task_blocks += [block_of[n] for n in nodes]
        ntok = len(nodes) * block_size
        for tok0 in range(0, ntok, chunk_tokens):
            unit0 = len(unit_seq)
            work.append((seq_off, len(sq), blk_off, tok0, min(tok0 + chunk_tokens, ntok), unit0))
            for i, b in enumerate(sq):
                units[b].append(unit0 + i)
                unit_seq.append(b)
    depth = max([len(u) for u in units] + [1])
    seq_units = np.full((B, depth), -1, np.int32)
    for b, u in enumerate(units):
        seq_units[b, :len(u)] = u
    seq_start = np.array([sum(1 for n in paths[b] if len(seqs[n]) >= 2) * block_size for b in range(B)], np.int32)
    as_i32 = lambda x, shape: np.asarray(x, np.int32).reshape(shape)  # noqa: E731
    return DecodeSchedule(as_i32(work, (len(work), 6)), as_i32(task_seqs, (len(task_seqs),)),
                          as_i32(task_blocks, (len(task_blocks),)), as_i32(unit_seq, (len(unit_seq),)), seq_units,
                          seq_start)
