"""The triangle multiplicative update's NKI kernels on the Trainium emulator.

The forward's per-pair work runs in NKI (``trimul_in_kernel``, ``trimul_out_kernel``), the
contraction and its gradient on the NKI GEMM, and the per-pair backward in PyTorch float32
autograd (see ``kernels/trainium/triangle_multiplication.py``). Checks: float64 oracle with
the error-ratio rule, odd N, a fully masked row of the pair mask, both directions, random
output gradients and every gradient; widths above one partition tile (chunked c_z and c);
the emulator's trn2 hardware rules at AlphaFold 3's widths; and the cost model at N = 384.
The emulator fills every new tile with NaN and fails any read of an unwritten element, and
the torch outputs are poisoned, so an element no kernel writes cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels.triangle.reference import TRIMUL_WEIGHTS
from tests.test_triangle import assert_close_ratio, poisoned, trimul_exact, trimul_inputs, trimul_run  # noqa: F401

F64 = torch.float64


@pytest.mark.parametrize("direction,B,N", [("outgoing", 1, 13), ("incoming", 2, 9)])
def test_trainium_trimul_fp32_every_gradient(direction, B, N, poisoned):  # noqa: F811
    x, mask, w = trimul_inputs(B, N, 16, 8, seed=100 + N)
    dout = torch.randn_like(x)
    out, grads = trimul_run(x, direction, mask, w, "trainium", dout)
    exact_out, exact_grads = trimul_exact(x, direction, mask, w, dout, F64)
    fw_out, fw_grads = trimul_exact(x, direction, mask, w, dout, torch.float32)
    assert_close_ratio("out", out, exact_out, fw_out, 1e-6)
    assert len(grads) == 13
    for name in grads:
        assert grads[name].shape == exact_grads[name].shape
        assert_close_ratio(f"d{name}", grads[name], exact_grads[name], fw_grads[name], 1e-5)


@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_trainium_trimul_kernels_chunk_wide_channels(direction, poisoned):  # noqa: F811
    """c_z = 160 and c = 136 take two partition chunks each; 23 * 23 = 529 pair rows take two
    row groups of the 512-wide moving operand. No mask: the kernels' unmasked variant."""
    from kernels.trainium.triangle_multiplication import trimul_fwd

    x, _, w = trimul_inputs(1, 23, 160, 136, seed=7)
    mask = torch.ones(x.shape[:3])
    out, saved = trimul_fwd(x, direction, None, [w[n] for n in TRIMUL_WEIGHTS], 1e-5, {"target": "trn2"})
    assert saved == ()
    exact = trimul_exact(x, direction, mask, w, torch.zeros_like(x), F64)[0]
    framework = trimul_exact(x, direction, mask, w, torch.zeros_like(x), torch.float32)[0]
    assert_close_ratio("out", out, exact, framework, 1e-6)


def test_trainium_trimul_bf16_forward(poisoned):  # noqa: F811
    x, mask, w = trimul_inputs(1, 11, 16, 16, seed=8, bias=False)
    dout = torch.randn_like(x)
    out, grads = trimul_run(x, "incoming", mask, w, "trainium", dout, dtype=torch.bfloat16)
    wb = {n: None if t is None else t.bfloat16() for n, t in w.items()}
    exact_out, exact_grads = trimul_exact(x.bfloat16(), "incoming", mask, wb, dout.bfloat16(), F64)
    fw_out, fw_grads = trimul_run(x, "incoming", mask, w, "reference", dout, dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert_close_ratio("out", out, exact_out, fw_out, 2e-2)
    for name in grads:
        assert_close_ratio(f"d{name}", grads[name], exact_grads[name], fw_grads[name], 3e-2)


def test_trainium_trimul_kernels_follow_trn2_rules_at_alphafold3_widths():
    """c_z = c = 128 (one full partition tile each, every matmul at its hardware limits) on trn2:
    every instruction passes the emulator's rule checks and the result matches float64."""
    from kernels.trainium.triangle_multiplication import trimul_fwd

    x, mask, w = trimul_inputs(1, 24, 128, 128, seed=9)
    out, _ = trimul_fwd(x, "outgoing", mask, [w[n] for n in TRIMUL_WEIGHTS], 1e-5, {"target": "trn2"})
    dout = torch.zeros_like(x)
    exact = trimul_exact(x, "outgoing", mask, w, dout, F64)[0]
    framework = trimul_exact(x, "outgoing", mask, w, dout, torch.float32)[0]
    assert_close_ratio("out", out, exact, framework, 1e-6)


def test_trainium_trimul_rules_reject_oversized_tiles():
    """The emulator stops a kernel whose gate matmul would exceed the 512-wide moving operand."""
    from kernels.trainium.emulator import HardwareRuleError
    from kernels.trainium.triangle_multiplication import trimul_fwd

    x, mask, w = trimul_inputs(1, 3, 640, 8, seed=10)
    with pytest.raises(HardwareRuleError) as err:
        trimul_fwd(x, "outgoing", mask, [w[n] for n in TRIMUL_WEIGHTS], 1e-5, {"target": "trn2"})
    assert err.value.rule == "matmul-moving-free"


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_trainium_trimul_cost_model_at_alphafold3_shape(target):
    from kernels.trainium.inspection import inspect_trainium_trimul

    rows = inspect_trainium_trimul(target)
    assert [r["config"] for r in rows] == ["trimul_in", "trimul_out"]
    for r in rows:
        assert r["rules"] == "ok", r.get("error")
        assert r["psum_peak_banks"] <= 8 and r["sbuf_peak_bytes_per_partition"] <= r["sbuf_bytes_per_partition"]
        assert r["instructions"]["tensor"] > 0 and r["instructions"]["scalar"] > 0
        assert np.isfinite(r["estimated_s"]) and r["estimated_s"] >= r["bound_s"] > 0
