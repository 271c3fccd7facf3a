"""ato_torch.nn against torch's own modules (CPU, the interpreter): a torch module's
state_dict loads into the ato module (strict, the same keys), and outputs and gradients
agree. Tolerances: fp32, reductions over at most 64 elements (norms) or 50 classes (loss)
computed in another order: torch.testing's fp32 defaults (rtol 1.3e-6, atol 1e-5)."""

import pytest
import torch
import torch.nn.functional as F

import ato_torch
import ato_torch.nn as ann


def _same(ours, theirs, x, *extra):
    """ours(x) == theirs(x) within tolerance, and the gradients of x and of the parameters."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa, *extra), theirs(xb, *extra)
    torch.testing.assert_close(ya, yb)
    g = torch.randn_like(ya)
    pa = [xa, *ours.parameters()]
    pb = [xb, *theirs.parameters()]
    for a, b in zip(torch.autograd.grad(ya, pa, g), torch.autograd.grad(yb, pb, g)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape,kwargs", [((48,), {}), ((4, 16), {"eps": 1e-3}), ((48,), {"bias": False}),
                                          ((48,), {"elementwise_affine": False})], ids=["1d", "2d", "no-bias", "plain"])
def test_layer_norm(shape, kwargs):
    theirs = torch.nn.LayerNorm(shape, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours = ann.LayerNorm(shape, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _same(ours, theirs, torch.randn(3, 5, *shape))


@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-5}, {"elementwise_affine": False}], ids=["eps-none", "eps", "plain"])
def test_rms_norm(kwargs):
    theirs = torch.nn.RMSNorm((2, 24), **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours = ann.RMSNorm((2, 24), **kwargs)
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _same(ours, theirs, torch.randn(7, 2, 24))


def test_norms_name_a_wrong_shape():
    with pytest.raises(ValueError, match=r"LayerNorm: input: expected trailing axes \[4, 16\]"):
        ann.LayerNorm((4, 16))(torch.randn(3, 16, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("layout", ["NC", "NCd", "C"])
def test_cross_entropy_loss(reduction, layout):
    shape, tshape = {"NC": ((6, 50), (6,)), "NCd": ((2, 50, 3), (2, 3)), "C": ((50,), ())}[layout]
    x = torch.randn(*shape)
    t = torch.randint(0, 50, tshape)
    if layout != "C":
        t.view(-1)[0] = -1  # ignored
    kw = {"ignore_index": -1, "reduction": reduction, "label_smoothing": 0.1}
    ours, theirs = ann.CrossEntropyLoss(**kw), torch.nn.CrossEntropyLoss(**kw)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    la, lb = ours(xa, t), theirs(xb, t)
    assert la.shape == lb.shape and la.dtype == lb.dtype
    torch.testing.assert_close(la, lb)
    g = torch.randn_like(la)
    torch.testing.assert_close(torch.autograd.grad(la, xa, g)[0], torch.autograd.grad(lb, xb, g)[0])


def test_cross_entropy_loss_refuses_what_it_lacks():
    with pytest.raises(ValueError, match="weight"):
        ann.CrossEntropyLoss(weight=torch.ones(5))
    with pytest.raises(TypeError, match="target: expected class indices"):
        ann.CrossEntropyLoss()(torch.randn(3, 5), torch.rand(3, 5))


def test_swiglu_mlp():
    class LlamaMLP(torch.nn.Module):  # Hugging Face's, written out
        def __init__(self, hidden, inter):
            super().__init__()
            self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
            self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
            self.down_proj = torch.nn.Linear(inter, hidden, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    theirs = LlamaMLP(32, 64)
    ours = ann.SwiGLU(32, 64)
    ours.load_state_dict(theirs.state_dict())
    _same(ours, theirs, torch.randn(4, 9, 32))


def _close_at_scale(a, b):
    """fp32 sums over tokens and features (projections, attention): torch's own error against
    float64 is ~1e-6 of the largest entry, and ato's the same (entries reach ~1e3 here)."""
    torch.testing.assert_close(a, b, rtol=1.3e-6, atol=1e-5 * max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_attention(batch_first, causal):
    """torch.nn.MultiheadAttention's state_dict loads (the same keys); output and gradients
    (input and every parameter) agree, self-attention, causal with torch's mask beside
    is_causal; cross-attention with another key length."""
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
    ours = ann.MultiheadAttention(32, 4, batch_first=batch_first)
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    shape = (2, 10, 32) if batch_first else (10, 2, 32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10) if causal else None

    def call(m):
        return lambda x: m(x, x, x, need_weights=False, attn_mask=mask, is_causal=causal)[0]
    x = torch.randn(shape)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = call(ours)(xa), call(theirs)(xb)
    _close_at_scale(ya, yb)
    g = torch.randn_like(ya)
    _close_at_scale(*[torch.autograd.grad(y, t, g)[0] for y, t in ((ya, xa), (yb, xb))])
    for m in (ours, theirs):
        m.zero_grad()
        call(m)(x).square().sum().backward()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        _close_at_scale(a.grad, b.grad)
    if not causal:
        kv = torch.randn((2, 7, 32) if batch_first else (7, 2, 32))
        torch.testing.assert_close(ours(x, kv, kv, need_weights=False)[0], theirs(x, kv, kv, need_weights=False)[0])


def test_multihead_attention_refuses_what_it_lacks():
    m, x = ann.MultiheadAttention(16, 2), torch.randn(5, 1, 16)
    with pytest.raises(ValueError, match="need_weights: ato's flash attention does not form the attention weights"):
        m(x, x, x)
    with pytest.raises(ValueError, match="MultiheadAttention: dropout: expected a float in"):
        ann.MultiheadAttention(16, 2, dropout=1.0)


def test_multihead_attention_dropout():
    """dropout in training mode is flash_attention's, its seed drawn from the default generator
    (torch.manual_seed repeats it); none in eval mode."""
    m = ann.MultiheadAttention(16, 2, dropout=0.3, batch_first=True)
    x = torch.randn(2, 9, 16)
    call = lambda: m(x, x, x, need_weights=False, is_causal=True)[0]  # noqa: E731
    torch.manual_seed(4)
    a, b = call(), call()
    torch.manual_seed(4)
    assert torch.equal(a, call()) and not torch.equal(a, b)
    torch.manual_seed(4)
    seed = int(torch.empty((), dtype=torch.int64).random_(2 ** 31))
    q, k, v = (torch.nn.functional.linear(x, w, bi).unflatten(-1, (2, 8)).transpose(1, 2)
               for w, bi in zip(m.in_proj_weight.chunk(3), m.in_proj_bias.chunk(3)))
    o = ato_torch.flash_attention(q, k, v, causal=True, dropout_p=0.3, seed=seed)
    torch.testing.assert_close(a, m.out_proj(o.transpose(1, 2).flatten(-2)), rtol=0, atol=0)
    m.eval()
    plain = ato_torch.flash_attention(q, k, v, causal=True)
    torch.testing.assert_close(call(), m.out_proj(plain.transpose(1, 2).flatten(-2)), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_multihead_attention_masks(kind):
    """attn_mask ([N, N] and [B * H, N, N]) and key_padding_mask as torch's MultiheadAttention
    reads them, bool (True: not allowed) and float (added), with every query keeping a key."""
    torch.manual_seed(5)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    ours = ann.MultiheadAttention(32, 4, batch_first=True)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 9, 32)
    blocked = torch.rand(2 * 4, 9, 9) < 0.4
    blocked[..., 0] = False
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, 6:] = True
    if kind == "float":
        blocked, padding = (torch.where(t, -1e9, torch.randn(t.shape)) for t in (blocked, padding))
    for attn_mask in (blocked, blocked[0]):
        ya, yb = (m(x, x, x, need_weights=False, attn_mask=attn_mask, key_padding_mask=padding)[0]
                  for m in (ours, theirs))
        _close_at_scale(ya, yb)
