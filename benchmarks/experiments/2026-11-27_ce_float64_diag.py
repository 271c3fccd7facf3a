import sys; sys.path[:0] = ["tests", "."]
import torch, test_float64 as t, ato_torch
_, call, arrays, native = [c for c in t.CASES if c[0] == "cross_entropy softcap"][0]
def grads(dev, fn):
    x = torch.tensor(arrays[0], dtype=torch.float64, device=dev, requires_grad=True)
    out = fn(x)
    return torch.autograd.grad(out, [x])[0].cpu(), out.item()
g = {}
g["ato_gpu"] = grads("cuda", lambda x: call(ato_torch, x))
g["torch_gpu"] = grads("cuda", native)
g["torch_cpu"] = grads("cpu", native)
exact = torch.tensor(arrays[0], dtype=torch.float64)
print("x*3/2 range", (1.5 * exact).abs().max().item())
for a in g:
    for b in g:
        if a < b:
            d = ((g[a][0] - g[b][0]).abs() / g[b][0].abs().clamp_min(1e-300)).max().item()
            print(a, "vs", b, "max rel", d, "loss", g[a][1], g[b][1])
print("ato_gpu grad", g["ato_gpu"][0][3].tolist()); print("torch_cpu grad", g["torch_cpu"][0][3].tolist())
