"""Runs one linear-attention case launch by launch on the GPU, synchronising after each,
and prints each launch's name, grid and constexprs: the first one that faults is named.
Usage: python benchmarks/debug_launches.py B H N Dk Dv dtype causal"""

import sys

import torch

import importlib

import ato_torch  # noqa: F401  (the package exports a function of the same name as the module)
from ato_torch import launcher

tla = importlib.import_module("ato_torch.linear_attention")

B, H, N, Dk, Dv = map(int, sys.argv[1:6])
dtype = getattr(torch, sys.argv[6])
causal = sys.argv[7] == "1"
original = launcher.run_plan


def run_plan(plan, arrays, target):
    for launch in plan.launches:
        print("launch", launch.name, launch.grid, dict(launch.constexprs), launch.num_warps, flush=True)
    env = dict(arrays)
    import dataclasses
    import os

    stages = os.environ.get("ATO_DEBUG_STAGES")
    if stages:  # try another pipelining depth for every launch
        plan = dataclasses.replace(plan, launches=tuple(dataclasses.replace(l, num_stages=int(stages))
                                                        for l in plan.launches))

    for i, launch in enumerate(plan.launches):
        sub = dataclasses.replace(plan, launches=(launch,), results=tuple(b.name for b in launch.outputs))
        outs = original(sub, env, target)
        torch.cuda.synchronize()
        print("  ok", launch.name, flush=True)
        env.update(zip(sub.results, outs))
    return tuple(env[n] for n in plan.results)


tla.run_plan = run_plan
q, k = (torch.randn(B, H, N, Dk, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
v = torch.randn(B, H, N, Dv, device="cuda", dtype=dtype, requires_grad=True)
S0 = torch.rand(B, H, Dk, Dv, device="cuda", requires_grad=True)
z0 = torch.rand(B, H, Dk, device="cuda", requires_grad=True)
o, (S, z) = tla.linear_attention(q, k, v, causal=causal, feature_map="elu", initial_state=(S0, z0) if causal else None,
                                 output_final_state=True)
(o.float().sum() + S.sum() + z.sum()).backward()
torch.cuda.synchronize()
print("all ok")
