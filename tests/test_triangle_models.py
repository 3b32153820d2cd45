"""Dropping ``ceiling.triangle`` into real models: strict weight loads, call signatures, ``patch``.

Against Boltz 2.2.1's own layers (installed without its dependencies, see
``tests/model_sources.py``) and ports of OpenFold's (``tests/ports/openfold``):

* a Boltz or an OpenFold state dict loads with ``strict=True`` into a module with that
  family's biases, and is refused (missing or unexpected bias keys) by the other;
  ``from_state_dict`` infers widths, heads and biases; outputs and every parameter
  gradient then match the source layer;
* our ``forward`` takes every argument of the layer it replaces;
* ``patch`` on a Boltz ``PairformerLayer`` with a padded token (its pair-mask row and
  column all zero) and on an OpenFold pair stack: outputs and every parameter gradient
  equal the unpatched model's on the valid positions (float32: 1e-5 relative; bf16
  under autocast: the error-ratio rule against a float64 run), finite everywhere;
* padded positions: ours gives the output projection's bias where an attention row
  has no valid key, the source layers the mean of v over that row's keys.

On the CPU with a few channels and N = 6, so that they stay fast; the test marked ``gpu`` repeats
the pair-stack checks on the device at AlphaFold 3's widths with our Triton kernels.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

import ceiling.backends
import ceiling.triangle
from ceiling.testing.numerics import assert_close
from ceiling.triangle.modules import TriangleAttention, TriangleMultiplication, openfold_to_boltz_trimul
from tests.model_sources import openfold, require_boltz

CZ, C, HEADS, HEAD_DIM, N = 16, 8, 2, 8, 6
PAD = N - 1  # the padded token


@pytest.fixture(autouse=True)
def _no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False


def randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Fresh random parameters (the families' initialisers zero several projections)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
            elif name.endswith("weight"):  # LayerNorm scales
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return module


def pair_inputs(seed: int, batch: int = 1):
    """x (batch, N, N, CZ) and a float pair mask with token PAD padded (its row and column zero)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, N, N, CZ, generator=g)
    token = torch.ones(batch, N)
    token[:, PAD] = 0
    return x, token[:, :, None] * token[:, None, :]


def rel_error(ours: torch.Tensor, theirs: torch.Tensor, floor: float = 0.0) -> float:
    """max |ours - theirs| over max |theirs| (at least ``floor``)."""
    scale = max(theirs.double().abs().max().item(), floor, 1e-30)
    return (ours.double() - theirs.double()).abs().max().item() / scale


def assert_rel(name: str, ours: torch.Tensor, theirs: torch.Tensor, tol: float = 1e-5, floor: float = 0.0) -> None:
    """Relative error at most ``tol``. ``floor``: the scale below which a tensor counts as zero (a
    gradient that vanishes in exact arithmetic, such as that of a bias a softmax is invariant to,
    is rounding noise in both runs)."""
    assert ours.shape == theirs.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
    assert torch.isfinite(ours).all(), f"{name}: non-finite values"
    err = rel_error(ours, theirs, floor)
    assert err <= tol, f"{name}: relative error {err:.3g} > {tol:g}"


# Parameter gradients that are zero in exact arithmetic, and why: both runs give rounding noise
# there, so they are held to an absolute tolerance (the error-ratio rule against the exact zero),
# not to a scale taken from the other gradients.
ZERO_IN_EXACT_ARITHMETIC = {
    # Boltz's AttentionPairBias: LayerNorm -> Linear(bias=False) -> the pair bias of the sequence
    # attention; the LayerNorm's bias adds W b to every score of a head's row, which the softmax
    # removes
    "attention.proj_z.0.bias",
}


def assert_gradient(name: str, ours: torch.Tensor, theirs: torch.Tensor, floor: float) -> None:
    """A parameter gradient: relative to the largest gradient entry (:func:`assert_rel`), or, for
    one that is zero in exact arithmetic, against zero at an absolute float32 tolerance."""
    if name in ZERO_IN_EXACT_ARITHMETIC:
        assert torch.isfinite(ours).all(), f"d[{name}]: non-finite values"
        assert_close(f"d[{name}]", ours, theirs, torch.zeros_like(ours, dtype=torch.float64), absolute=True)
    else:
        assert_rel(f"d[{name}]", ours, theirs, floor=floor)


def gradient_floor(grads: dict) -> float:
    """1e-3 of the largest parameter gradient entry: the scale of 'zero' for :func:`assert_rel`."""
    return 1e-3 * max(g.abs().max().item() for g in grads.values() if g is not None)


def run_with_grads(module, x, dout, **kwargs):
    """(output, dx, {parameter name: gradient}) for a random output gradient."""
    x = x.detach().clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = module(x, **kwargs)
    out.backward(dout)
    return out.detach(), x.grad, {n: p.grad for n, p in module.named_parameters()}


def compare(ours_module, theirs_module, x, mask, *, openfold_trimul=False, ours_kwargs=None, theirs_kwargs=None):
    """Outputs, dx and every parameter gradient of the two modules, on the positions ``valid`` marks."""
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)) * mask[..., None]
    o1, dx1, g1 = run_with_grads(ours_module, x, dout, mask=mask, **(ours_kwargs or {}))
    o2, dx2, g2 = run_with_grads(theirs_module, x, dout, mask=mask, **(theirs_kwargs or {}))
    valid = mask.bool()
    assert torch.isfinite(o1).all() and torch.isfinite(dx1).all()
    assert_rel("out", o1[valid], o2[valid])
    assert_rel("dx", dx1[valid], dx2[valid])
    if openfold_trimul:
        g2 = openfold_to_boltz_trimul(g2)  # their a/b gradients, stacked as ours are
    assert set(g1) == set(g2), (sorted(g1), sorted(g2))
    floor = gradient_floor(g2)
    for name in g1:
        assert_gradient(name, g1[name], g2[name], floor)


# ----------------------------------------------------------------------------- Boltz


def boltz_layer(kind: str):
    require_boltz()
    from boltz.model.layers.triangular_attention.attention import (TriangleAttentionEndingNode,
                                                                   TriangleAttentionStartingNode)
    from boltz.model.layers.triangular_mult import TriangleMultiplicationIncoming, TriangleMultiplicationOutgoing

    make = {"outgoing": lambda: TriangleMultiplicationOutgoing(CZ), "incoming": lambda: TriangleMultiplicationIncoming(CZ),
            "starting": lambda: TriangleAttentionStartingNode(CZ, HEAD_DIM, HEADS),
            "ending": lambda: TriangleAttentionEndingNode(CZ, HEAD_DIM, HEADS)}[kind]
    return randomize(make(), seed=len(kind))


@pytest.mark.parametrize("kind", ["outgoing", "incoming", "starting", "ending"])
def test_boltz_state_dict_loads_strictly(kind):
    theirs = boltz_layer(kind)
    state = theirs.state_dict()
    if kind in ("outgoing", "incoming"):
        ours = TriangleMultiplication.from_state_dict(state, kind)
        assert all(getattr(ours, p).bias is None for p in ("p_in", "g_in", "p_out", "g_out"))
        TriangleMultiplication(CZ, CZ, kind, bias=False).load_state_dict(state, strict=True)
        with pytest.raises(RuntimeError, match=r"Missing key\(s\).*p_in\.bias"):
            TriangleMultiplication(CZ, CZ, kind, bias=True).load_state_dict(state, strict=True)
    else:
        ours = TriangleAttention.from_state_dict(state, starting=kind == "starting")
        assert ours.mha.linear_o.bias is None and ours.mha.linear_g.bias is None
        assert (ours.c_in, ours.c_hidden, ours.no_heads) == (CZ, HEAD_DIM, HEADS)
        TriangleAttention(CZ, HEAD_DIM, HEADS, bias=False).load_state_dict(state, strict=True)
        # The claim this replaces: OpenFold's biases on the gate and output projections.
        with pytest.raises(RuntimeError, match=r'Missing key\(s\).*"mha\.linear_o\.bias", "mha\.linear_g\.bias"'):
            TriangleAttention(CZ, HEAD_DIM, HEADS).load_state_dict(state, strict=True)
    x, mask = pair_inputs(seed=1)
    compare(ours, theirs, x, mask)


def _forward_parameters(cls) -> set[str]:
    """The names of forward's arguments after the pair tensor (Boltz calls it x, OpenFold z; both pass
    it by position)."""
    return set(list(inspect.signature(cls.forward).parameters)[2:])


def test_forward_takes_the_arguments_of_the_replaced_layers():
    require_boltz()
    from boltz.model.layers.triangular_attention.attention import TriangleAttention as BoltzAttention
    from boltz.model.layers.triangular_mult import TriangleMultiplicationOutgoing

    of_att = openfold("model.triangular_attention").TriangleAttention
    of_mul = openfold("model.triangular_multiplicative_update")
    for ours, theirs in ((TriangleMultiplication, TriangleMultiplicationOutgoing),
                         (TriangleMultiplication, of_mul.TriangleMultiplicativeUpdate),
                         (TriangleMultiplication, of_mul.FusedTriangleMultiplicativeUpdate),
                         (TriangleAttention, BoltzAttention), (TriangleAttention, of_att)):
        missing = _forward_parameters(theirs) - _forward_parameters(ours)
        assert not missing, f"{ours.__name__}.forward lacks {theirs.__module__}.{theirs.__qualname__}'s {missing}"
    # The implementation switches change nothing.
    x, mask = pair_inputs(seed=2)
    att = randomize(TriangleAttention(CZ, HEAD_DIM, HEADS, starting=False), 3)
    plain = att(x, mask)
    for flags in ({"use_kernels": True, "chunk_size": 2}, {"chunk_size": 4, "use_memory_efficient_kernel": True,
                                                            "use_deepspeed_evo_attention": True, "use_lma": True,
                                                            "inplace_safe": True}):
        torch.testing.assert_close(att(x, mask=mask, **flags), plain, rtol=0, atol=0)
    mul = randomize(TriangleMultiplication(CZ, C, "incoming", bias=True), 4)
    update = mul(x, mask)
    torch.testing.assert_close(mul(x, mask=mask, use_kernels=True, _inplace_chunk_size=2), update, rtol=0, atol=0)
    # OpenFold's in-place contract: with _add_with_inplace, x itself becomes x + update.
    with torch.no_grad():
        z = x.clone()
        result = mul(z, mask=mask, inplace_safe=True, _add_with_inplace=True)
    assert result is z
    torch.testing.assert_close(result, x + update, rtol=1e-6, atol=1e-6)


def test_padded_positions_zero_here_mean_of_v_there():
    """A padded token's row of starting-node attention has no valid key. Boltz's -1e9 mask makes
    it the mean of v over all the row's keys; ours gives a zero attention output there, so the
    layer returns linear_o's bias (Boltz has none: zero). Every other row is the same in both."""
    theirs = boltz_layer("starting")
    ours = TriangleAttention.from_state_dict(theirs.state_dict())
    x, mask = pair_inputs(seed=6)
    out_ours, out_theirs = ours(x, mask), theirs(x, mask=mask)
    assert (out_ours[:, PAD] == 0).all()
    xn = theirs.layer_norm(x[:, PAD])  # (1, J, C): row PAD; its keys are all masked
    v = theirs.mha.linear_v(xn).view(1, N, HEADS, HEAD_DIM)
    gate = torch.sigmoid(theirs.mha.linear_g(xn)).view(1, N, HEADS, HEAD_DIM)
    mean_of_v = v.mean(dim=1, keepdim=True).expand(1, N, HEADS, HEAD_DIM)
    expected = theirs.mha.linear_o((mean_of_v * gate).reshape(1, N, HEADS * HEAD_DIM))
    torch.testing.assert_close(out_theirs[:, PAD], expected, rtol=1e-5, atol=1e-6)
    valid = mask.bool()
    assert_rel("valid rows", out_ours[valid], out_theirs[valid])


# ----------------------------------------------------------------------------- OpenFold


OPENFOLD_LAYERS = {
    "TriangleMultiplicationOutgoing": ("model.triangular_multiplicative_update", lambda cls: cls(CZ, C)),
    "TriangleMultiplicationIncoming": ("model.triangular_multiplicative_update", lambda cls: cls(CZ, C)),
    "FusedTriangleMultiplicationIncoming": ("model.triangular_multiplicative_update", lambda cls: cls(CZ, C)),
    "TriangleAttentionStartingNode": ("model.triangular_attention", lambda cls: cls(CZ, HEAD_DIM, HEADS)),
    "TriangleAttentionEndingNode": ("model.triangular_attention", lambda cls: cls(CZ, HEAD_DIM, HEADS)),
}


@pytest.mark.parametrize("name", sorted(OPENFOLD_LAYERS))
def test_openfold_state_dict_loads_strictly(name):
    module, make = OPENFOLD_LAYERS[name]
    theirs = randomize(make(getattr(openfold(module), name)), seed=len(name))
    state = theirs.state_dict()
    if "Multiplication" in name:
        direction = "outgoing" if theirs._outgoing else "incoming"
        ours = TriangleMultiplication.from_state_dict(state, direction)
        assert all(getattr(ours, p).bias is not None for p in ("p_in", "g_in", "p_out", "g_out"))
        TriangleMultiplication(CZ, C, direction, bias=True).load_state_dict(state, strict=True)
        with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*\.bias"):
            TriangleMultiplication(CZ, C, direction, bias=False).load_state_dict(state, strict=True)
    else:
        ours = TriangleAttention.from_state_dict(state, starting=theirs.starting)
        assert ours.mha.linear_o.bias is not None and ours.linear.bias is None and ours.mha.linear_q.bias is None
        TriangleAttention(CZ, HEAD_DIM, HEADS, theirs.starting, bias=True).load_state_dict(state, strict=True)
        with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*mha\.linear_o\.bias"):
            TriangleAttention(CZ, HEAD_DIM, HEADS, theirs.starting, bias=False).load_state_dict(state, strict=True)
    x, mask = pair_inputs(seed=7)
    compare(ours, theirs, x, mask, openfold_trimul="Multiplication" in name)


class OpenFoldPairStack(torch.nn.Module):
    """The triangle half of OpenFold's ``PairStack`` (openfold/model/evoformer.py), called as it calls
    its layers (keywords included), dropout and the pair transition left out."""

    def __init__(self, fused: bool):
        super().__init__()
        mul = openfold("model.triangular_multiplicative_update")
        att = openfold("model.triangular_attention")
        prefix = "Fused" if fused else ""
        self.tri_mul_out = getattr(mul, f"{prefix}TriangleMultiplicationOutgoing")(CZ, C)
        self.tri_mul_in = getattr(mul, f"{prefix}TriangleMultiplicationIncoming")(CZ, C)
        self.tri_att_start = att.TriangleAttention(CZ, HEAD_DIM, HEADS)
        self.tri_att_end = att.TriangleAttention(CZ, HEAD_DIM, HEADS)

    def forward(self, z, mask):
        z = z + self.tri_mul_out(z, mask=mask, inplace_safe=False, _add_with_inplace=True)
        z = z + self.tri_mul_in(z, mask=mask, inplace_safe=False, _add_with_inplace=True)
        flags = dict(chunk_size=None, use_memory_efficient_kernel=False, use_deepspeed_evo_attention=False,
                     use_lma=False, inplace_safe=False)
        z = z + self.tri_att_start(z, mask=mask, **flags)
        z = z.transpose(-2, -3)
        z = z + self.tri_att_end(z, mask=mask.transpose(-1, -2), **flags)
        return z.transpose(-2, -3)


@pytest.mark.parametrize("fused", [False, True])
def test_patch_openfold_pair_stack(fused):
    theirs = randomize(OpenFoldPairStack(fused), seed=8 + fused)
    ours = copy.deepcopy(theirs)
    replaced = ceiling.triangle.patch(ours)
    prefix = "Fused" if fused else ""
    assert [(name, cls.__name__) for name, cls, _ in replaced] == [
        ("tri_mul_out", f"{prefix}TriangleMultiplicationOutgoing"), ("tri_mul_in", f"{prefix}TriangleMultiplicationIncoming"),
        ("tri_att_start", "TriangleAttention"), ("tri_att_end", "TriangleAttention")]
    assert ours.tri_mul_in.direction == "incoming" and ours.tri_att_start.starting
    # Parameters are the replaced layers' own (the unfused a/b projections excepted: they are stacked).
    assert ours.tri_att_end.mha.linear_o.bias is replaced[3][2].mha.linear_o.bias
    x, mask = pair_inputs(seed=9, batch=2)
    dout = torch.randn(x.shape) * mask[..., None]
    z1, dz1, g1 = run_with_grads(ours, x, dout, mask=mask)
    z2, dz2, g2 = run_with_grads(theirs, x, dout, mask=mask)
    valid = mask.bool()
    assert torch.isfinite(z1).all() and torch.isfinite(dz1).all()
    assert_rel("z", z1[valid], z2[valid])
    assert_rel("dz", dz1[valid], dz2[valid])
    for layer in ("tri_mul_out", "tri_mul_in"):
        theirs_grads = {k[len(layer) + 1:]: v for k, v in g2.items() if k.startswith(layer + ".")}
        for k, v in openfold_to_boltz_trimul(theirs_grads).items():
            g2[f"{layer}.{k}"] = v
    floor = gradient_floor(g2)
    for name in g1:
        assert_gradient(name, g1[name], g2[name], floor)


def test_patch_refuses_a_bare_layer():
    layer = openfold("model.triangular_attention").TriangleAttention(CZ, HEAD_DIM, HEADS)
    with pytest.raises(ValueError, match="cannot be replaced in place"):
        ceiling.triangle.patch(layer)
    from ceiling.triangle.patching import replacement

    assert isinstance(replacement(layer), TriangleAttention)


# ----------------------------------------------------------------------------- Boltz PairformerLayer


def pairformer_layer(seed: int):
    require_boltz()
    from boltz.model.layers.pairformer import PairformerLayer

    torch.manual_seed(seed)
    layer = PairformerLayer(CZ, CZ, num_heads=2, pairwise_head_width=HEAD_DIM, pairwise_num_heads=HEADS, v2=True)
    return randomize(layer, seed).eval()  # eval: dropout off, so both runs compute one function


def test_patch_boltz_pairformer_layer_with_a_padded_token():
    theirs = pairformer_layer(10)
    ours = copy.deepcopy(theirs)
    before = {n: p for n, p in ours.named_parameters()}
    replaced = ceiling.triangle.patch(ours)
    # The new layers hold the very parameters the old ones did: an optimizer built before still applies.
    assert {n: p for n, p in ours.named_parameters()}.items() == before.items()
    assert [(name, cls.__name__, type(new).__name__) for name, cls, new in replaced] == [
        ("tri_mul_out", "TriangleMultiplicationOutgoing", "TriangleMultiplication"),
        ("tri_mul_in", "TriangleMultiplicationIncoming", "TriangleMultiplication"),
        ("tri_att_start", "TriangleAttention", "TriangleAttention"),
        ("tri_att_end", "TriangleAttentionEndingNode", "TriangleAttention")]
    assert ours.tri_att_end.starting is False and ours.tri_mul_in.direction == "incoming"

    g = torch.Generator().manual_seed(11)
    s, (z, pair_mask) = torch.randn(1, N, CZ, generator=g), pair_inputs(seed=12)
    token_mask = torch.ones(1, N)
    token_mask[:, PAD] = 0
    ds = torch.randn(s.shape, generator=g) * token_mask[..., None]
    dz = torch.randn(z.shape, generator=g) * pair_mask[..., None]

    def run(layer):
        leaves = [t.clone().requires_grad_() for t in (s, z)]
        layer.zero_grad(set_to_none=True)
        out_s, out_z = layer(*leaves, token_mask, pair_mask)
        torch.autograd.backward([out_s, out_z], [ds, dz])
        return out_s.detach(), out_z.detach(), leaves[0].grad, leaves[1].grad, \
            {n: p.grad for n, p in layer.named_parameters()}

    s1, z1, ds1, dz1, g1 = run(ours)
    s2, z2, ds2, dz2, g2 = run(theirs)
    tok, pair = token_mask.bool(), pair_mask.bool()
    for name, t in (("s", s1), ("z", z1), ("ds", ds1), ("dz", dz1), *g1.items()):
        assert t is not None and torch.isfinite(t).all(), f"{name}: not finite"
    assert_rel("s", s1[tok], s2[tok])
    assert_rel("z", z1[pair], z2[pair])
    assert_rel("ds", ds1[tok], ds2[tok])
    assert_rel("dz", dz1[pair], dz2[pair])
    assert set(g1) == set(g2) and len(g1) > 30 and ZERO_IN_EXACT_ARITHMETIC <= set(g1)
    floor = gradient_floor(g2)
    for name in g1:
        assert_gradient(name, g1[name], g2[name], floor)
    assert not torch.allclose(z1[~pair], z2[~pair])  # the padded positions do differ (see the module docs)


def test_a_gradient_zero_in_exact_arithmetic_is_compared_at_an_absolute_scale():
    """The rounding noise a zero gradient shows in float32 (1e-7 where the largest gradient is
    about 27, as in the layer above) passes; a relative check against the largest gradient
    failed on it; a real error still fails."""
    name = next(iter(ZERO_IN_EXACT_ARITHMETIC))
    theirs = torch.full((CZ,), 1.2e-7)
    ours = theirs - 4e-7
    floor = gradient_floor({"big": torch.tensor([26.6])})
    with pytest.raises(AssertionError, match="relative error"):
        assert_rel(f"d[{name}]", ours, theirs, floor=floor)
    assert_gradient(name, ours, theirs, floor)
    with pytest.raises(AssertionError):
        assert_gradient(name, theirs + 1e-3, theirs, floor)


def pair_stack_run(layer, z, pair_mask, dz, dtype, autocast: bool) -> dict:
    """Boltz's pair stack of ``layer`` (see ceiling.microbench.benchmarks.pair_stack.boltz_pair_stack), forward and
    backward: {"z": output, "dz": its input gradient, parameter name: gradient}."""
    from ceiling.microbench.benchmarks.pair_stack import boltz_pair_stack

    zl = z.detach().to(dtype).clone().requires_grad_()
    layer.zero_grad(set_to_none=True)
    with torch.autocast(z.device.type, dtype=torch.bfloat16, enabled=autocast):
        out = boltz_pair_stack(layer, zl, pair_mask.to(dtype))
    out.backward(dz.to(out.dtype))
    return {"z": out.detach(), "dz": zl.grad, **{n: p.grad for n, p in layer.named_parameters()}}


def check_pair_stack_bf16(theirs, z, pair_mask, backend):
    """bf16 autocast, as Boltz trains: ours (patched) against Boltz's own bf16 run, both measured
    against a float64 run, by the error-ratio rule on the valid positions. Boltz's layers cannot run
    in float64 (its TriMul casts to float32), so the float64 run is the patched layer on the
    reference backend in float64; the float32 checks tie that to Boltz's layer."""
    ours = copy.deepcopy(theirs)
    ceiling.triangle.patch(ours, backend=backend)
    exact = copy.deepcopy(theirs).double()
    ceiling.triangle.patch(exact, backend="reference")
    dz = torch.randn(z.shape, generator=torch.Generator().manual_seed(15)).to(z.device) * pair_mask[..., None]
    mine, framework = (pair_stack_run(m, z, pair_mask, dz, torch.float32, True) for m in (ours, theirs))
    truth = pair_stack_run(exact, z, pair_mask, dz, torch.float64, False)
    valid = pair_mask.bool()
    for name in truth:
        if truth[name] is None:  # the sequence track's parameters take no part in the pair stack
            assert mine[name] is None and framework[name] is None, name
            continue
        assert torch.isfinite(mine[name]).all(), f"{name}: not finite"
        pick = (lambda t: t[valid]) if name in ("z", "dz") else (lambda t: t)
        assert_close(name, pick(mine[name]).float(), pick(framework[name]).float(), pick(truth[name]), atol=1e-2)
    assert mine["z"].dtype == framework["z"].dtype


def check_pair_stack_fp32(theirs, z, pair_mask, backend):
    """Float32: ours (patched) equals Boltz's layer on the valid positions, every pair-stack parameter
    gradient included, to 1e-5 relative; finite everywhere."""
    ours = copy.deepcopy(theirs)
    ceiling.triangle.patch(ours, backend=backend)
    dz = torch.randn(z.shape, generator=torch.Generator().manual_seed(16)).to(z.device) * pair_mask[..., None]
    mine, base = (pair_stack_run(m, z, pair_mask, dz, torch.float32, False) for m in (ours, theirs))
    valid = pair_mask.bool()
    used = [n for n in base if n not in ("z", "dz") and base[n] is not None]
    floor = gradient_floor({n: base[n] for n in used})
    assert_rel("z", mine["z"][valid], base["z"][valid])
    assert_rel("dz", mine["dz"][valid], base["dz"][valid])
    assert torch.isfinite(mine["z"]).all() and torch.isfinite(mine["dz"]).all()
    for name in used:
        assert_gradient(name, mine[name], base[name], floor)


def test_patch_boltz_pair_stack_fp32_with_the_triton_kernels():
    """The pair stack with our Triton kernels (interpreted here) in place of Boltz's layers."""
    z, pair_mask = pair_inputs(seed=19)
    check_pair_stack_fp32(pairformer_layer(20), z, pair_mask, "nvidia")


@pytest.mark.parametrize("backend", [None, "nvidia"])
def test_patch_boltz_pair_stack_bf16_under_autocast(backend):
    z, pair_mask = pair_inputs(seed=14)
    check_pair_stack_bf16(pairformer_layer(13), z, pair_mask, backend)


ON_NVIDIA = pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia",
                               reason="needs an NVIDIA GPU; the tests above run the same layers on the CPU")


@pytest.mark.gpu
@ON_NVIDIA
def test_on_gpu_patched_pairformer_pair_stack():
    """On the device, at AlphaFold 3's widths (c_z = 128, 4 heads of 32), N = 129 with a padded tail of
    seven tokens: float32 to 1e-5 relative, and bf16 autocast by the error-ratio rule, outputs and
    every parameter gradient on the valid positions, our kernels (backend nvidia) in the layer."""
    require_boltz()
    from ceiling.microbench.benchmarks.pair_stack import make_layer

    n = 129
    layer = make_layer(32, 2, 128, 4, 32, seed=17, device="cuda")
    g = torch.Generator().manual_seed(18)
    z = torch.randn(1, n, n, 128, generator=g).cuda()
    token = torch.ones(1, n)
    token[:, n - 7:] = 0
    pair_mask = (token[:, :, None] * token[:, None, :]).cuda()
    check_pair_stack_fp32(layer, z, pair_mask, "nvidia")
    check_pair_stack_bf16(layer, z, pair_mask, "nvidia")


def test_modules_compile_as_one_graph_under_autocast():
    """``torch.compile(fullgraph=True)`` of our layers under autocast: their autocast-dtype choice and
    argument handling break no graph (the custom ops' own compile tests are in test_triangle.py; the
    patched pair stack under torch.compile is a benchmark implementation on the device)."""
    att = randomize(TriangleAttention(CZ, HEAD_DIM, HEADS, starting=False, bias=False), 23)
    mul = randomize(TriangleMultiplication(CZ, C, "incoming"), 24)
    x, mask = pair_inputs(seed=25)

    def layers(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = x + mul(x, mask=mask, use_kernels=True)
            return x + att(x, mask=mask, chunk_size=4)

    eager = layers(x)
    xl = x.clone().requires_grad_()
    compiled = torch.compile(layers, backend="aot_eager", fullgraph=True)(xl)
    assert compiled.dtype == eager.dtype == torch.float32  # float32 residual + bf16 updates, as in Boltz
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    (dx,) = torch.autograd.grad(compiled, xl, torch.ones_like(compiled))
    assert torch.isfinite(dx).all()
