"""The triangle ops on Trainium, on the emulator: triangle attention through the NKI flash
attention (the cases of ``tests/test_triangle.py``), and the triangle multiplicative update's NKI
kernels.

The per-pair work runs in NKI both ways (forward ``trimul_in_kernel``, ``trimul_out_kernel``;
backward ``trimul_out_bwd_kernel``, ``trimul_in_bwd_kernel``), the contraction and its
gradient on the NKI GEMM (see ``kernels/trainium/triangle_multiplication.py``). Checks:
float64 oracle with the error-ratio rule, odd N, a fully masked row of the pair mask, both
directions, random output gradients and all 13 gradients (x and every weight, bias and
LayerNorm parameter); widths above one partition tile (chunked c_z and c) and more than one
512-row group, forward and backward; bfloat16; the emulator's trn2 hardware rules at
AlphaFold 3's widths; and the cost model (every rule checked) at N = 384. The emulator fills
every new tile with NaN, fails any read of an unwritten element and any kernel output not
fully written, and the torch outputs are poisoned, so an element no kernel writes cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ceiling.testing.numerics import assert_close
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from tests.test_triangle import (TriangleAttentionTest, TrimulTest, poisoned, pytest_generate_tests,  # noqa: F401
                                 trimul_exact, trimul_inputs)

F64 = torch.float64


class TestTrainiumAttention(TriangleAttentionTest):
    """The NKI flash attention on the pair rows of each batch element."""

    backend = "trainium"
    fp32_cases = [(2, 9, 2, 32)]


class TestTrainiumTrimul(TrimulTest):
    backend = "trainium"
    fp32_cases = [(2, 11, 16, 8, "outgoing"), (1, 9, 16, 8, "incoming"), (1, 13, 16, 8, "outgoing"),
                  (2, 9, 16, 8, "incoming")]
    # bfloat16 operands on TensorE in both directions of the pass (fp32 accumulation); the
    # backward's dy, gate-logit gradient, [du; dv] and x_hat are bf16 matmul operands, so its
    # error is a few bf16 ulps of the largest gradient
    bf16_cases = [(11, 8, "incoming")]
    jax_cases = [("outgoing",)]


def _launch(x, direction, mask, weights, target="trn2"):
    """The problem and the resolved config of one call on ``target``: what the launcher takes."""
    from ceiling.triangle.op import TRIANGLE_MULTIPLICATIVE_UPDATE
    from ceiling.triangle.spec import check_trimul

    problem = check_trimul(x, direction, mask, dict(zip(TRIMUL_WEIGHTS, weights)))
    return problem, TRIANGLE_MULTIPLICATIVE_UPDATE.select(problem, "trainium", {"target": target}).forward.config


def _forward_backward(x, direction, mask, weights, dout):
    """(out, 13 gradients) through the launcher on trn2; nothing kept between the passes."""
    from ceiling.trainium import triangle_multiplication as tm

    problem, config = _launch(x, direction, mask, weights)
    out, ab, y = tm.forward(problem, config, x, mask, *weights)
    assert ab.numel() == 0 and y.numel() == 0
    saved = {"x": x, "mask": mask, **dict(zip(TRIMUL_WEIGHTS, weights)), "ab": ab, "y": y}
    needs = {n: True for n in ("x", *TRIMUL_WEIGHTS)}
    return out, tm.backward(problem, config, saved, {"out": dout}, needs)


def _assert_every_gradient(grads, exact, framework, atol):
    names = ["x", *TRIMUL_WEIGHTS]
    assert len(grads) == len(names) == 13
    for name, g in zip(names, grads):
        assert g.shape == exact[name].shape, name
        assert_close(f"d{name}", g, framework[name], exact[name], atol=atol)


@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_trainium_trimul_kernels_chunk_wide_channels(direction, poisoned):  # noqa: F811
    """c_z = 160 and c = 136 take two partition chunks each; 23 * 23 = 529 pair rows take two
    row groups of the 512-wide moving operand, so the backward's weight gradients are summed
    across groups. No mask: the kernels' unmasked variant."""
    x, _, w = trimul_inputs(1, 23, 160, 136, seed=7)
    mask = torch.ones(x.shape[:3])
    weights = [w[n] for n in TRIMUL_WEIGHTS]
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(17))
    out, grads = _forward_backward(x, direction, None, weights, dout)
    exact_out, exact = trimul_exact(x, direction, mask, w, dout, F64)
    fw_out, framework = trimul_exact(x, direction, mask, w, dout, torch.float32)
    assert_close("out", out, fw_out, exact_out, atol=1e-6)
    _assert_every_gradient(grads, exact, framework, 1e-5)


def test_trainium_trimul_kernels_follow_trn2_rules_at_alphafold3_widths(poisoned):  # noqa: F811
    """c_z = c = 128 (one full partition tile each, every matmul at its hardware limits) on trn2,
    forward and backward: every instruction passes the emulator's rule checks and the results
    match float64. 24 * 24 = 576 pair rows: two row groups, the second partial."""
    x, mask, w = trimul_inputs(1, 24, 128, 128, seed=9)
    weights = [w[n] for n in TRIMUL_WEIGHTS]
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(19))
    out, grads = _forward_backward(x, "incoming", mask, weights, dout)
    exact_out, exact = trimul_exact(x, "incoming", mask, w, dout, F64)
    fw_out, framework = trimul_exact(x, "incoming", mask, w, dout, torch.float32)
    assert_close("out", out, fw_out, exact_out, atol=1e-6)
    _assert_every_gradient(grads, exact, framework, 1e-5)


def test_trainium_trimul_backward_kernels_write_every_output():
    """The backward kernels on their own, outputs compared with the float64 per-pair backward
    (torch autograd of the same per-pair math around a fixed contraction result): every HBM
    output is checked fully written by the emulator's ``jit``, and the torch side never sees a
    NaN. N = 5 with one fully masked pair row, c_z = 16, c = 8."""
    from ceiling.trainium import triangle_multiplication as tm
    from ceiling.triangle.trimul_reference import layer_norm

    g = torch.Generator().manual_seed(23)
    x, mask, w = trimul_inputs(2, 5, 16, 8, seed=23)
    weights = [w[n] for n in TRIMUL_WEIGHTS]
    B, N, _, CZ = x.shape
    C, R = 8, N * N
    y = torch.randn(B, C, R, generator=g)  # a channel-first contraction result
    dout = torch.randn(B, R, CZ, generator=g)
    da, db = torch.randn(B, C, R, generator=g), torch.randn(B, C, R, generator=g)
    kw = tm._kernel_weights([w_.numpy() for w_ in weights], "float32")
    xr, mr = x.reshape(B, R, CZ).numpy(), mask.reshape(B, R).numpy()
    _, _, gate, _ = tm.forward_in_np(xr, mr, kw, 1e-5, "trn1")
    dy, dgl, dwpo, dbpo, dlnw_o, dlnb_o, _ = tm.backward_out_np(y.numpy(), gate, dout.numpy(), kw, 1e-5, "trn1")
    dx, dw_in, db_in, dwgo, dbgo, dlnw, dlnb, _ = tm.backward_in_np(xr, mr, da.numpy(), db.numpy(), dgl, kw, 1e-5, "trn1")

    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = (t.double().requires_grad_() for t in weights)
    xl, yl = x.reshape(B, R, CZ).double().requires_grad_(), y.double().requires_grad_()
    xn = layer_norm(xl, lnw, lnb, 1e-5)
    uv = torch.sigmoid(xn @ wg.T + bg) * (xn @ wp.T + bp) * mask.reshape(B, R, 1).double()
    gl = xn @ wgo.T + bgo
    out = torch.sigmoid(gl) * (layer_norm(yl.transpose(1, 2), lnw_o, lnb_o, 1e-5) @ wpo.T + bpo)
    loss = (out * dout.double()).sum() + (uv[..., :C].transpose(1, 2) * da.double()).sum() \
        + (uv[..., C:].transpose(1, 2) * db.double()).sum()
    leaves = [xl, yl, lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo]
    # The gate-logit gradient: what the output-side kernel hands the input side besides dy.
    ex_dgl = torch.autograd.grad((out * dout.double()).sum(), gl, retain_graph=True)[0]
    ex = dict(zip(["x", "y", *TRIMUL_WEIGHTS], torch.autograd.grad(loss, leaves)))
    ours = {
        "y": dy, "x": dx.reshape(B, R, CZ), "dgl": dgl, "norm_in_weight": dlnw, "norm_in_bias": dlnb,
        "p_in_weight": dw_in[: 2 * C], "p_in_bias": db_in[: 2 * C], "g_in_weight": dw_in[2 * C :],
        "g_in_bias": db_in[2 * C :], "norm_out_weight": dlnw_o, "norm_out_bias": dlnb_o, "p_out_weight": dwpo,
        "p_out_bias": dbpo, "g_out_weight": dwgo, "g_out_bias": dbgo,
    }
    ex["dgl"] = ex_dgl
    for name, v in ours.items():
        got = torch.from_numpy(np.asarray(v, dtype=np.float64)).reshape(ex[name].shape)
        assert torch.isfinite(got).all(), name
        scale = max(1.0, ex[name].abs().max().item())
        assert (got - ex[name]).abs().max().item() <= 2e-5 * scale, name


def test_trainium_trimul_rules_reject_oversized_tiles():
    """The emulator stops a kernel whose gate matmul would exceed the 512-wide moving operand."""
    import ceiling
    from ceiling.trainium.emulator import HardwareRuleError

    x, mask, w = trimul_inputs(1, 3, 640, 8, seed=10)
    with pytest.raises(HardwareRuleError) as err:
        ceiling.triangle_multiplicative_update(x, "outgoing", mask, **w, backend="trainium", config={"target": "trn2"})
    assert err.value.rule == "matmul-moving-free"


# trn1's rules at this shape also run in `ceiling run`'s ISA step, which CI runs.
@pytest.mark.parametrize("target", ["trn2", pytest.param("trn1", marks=pytest.mark.slow)])
def test_trainium_trimul_cost_model_at_alphafold3_shape(target):
    from ceiling.trainium.inspection import inspect_trainium_trimul

    rows = inspect_trainium_trimul(target)
    assert [r["config"] for r in rows] == ["trimul_in", "trimul_out", "trimul_out_bwd", "trimul_in_bwd"]
    for r in rows:
        assert r["rules"] == "ok", r.get("error")
        assert r["psum_peak_banks"] <= 8 and r["sbuf_peak_bytes_per_partition"] <= r["sbuf_bytes_per_partition"]
        assert r["instructions"]["tensor"] > 0 and r["instructions"]["scalar"] > 0
        assert np.isfinite(r["estimated_s"]) and r["estimated_s"] >= r["bound_s"] > 0
