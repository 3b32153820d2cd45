"""Attention on a real GPU: correctness against PyTorch's SDPA and a throughput probe.

Needs CUDA (Hopper for the nvidia backend) or ROCm; on the CPU these tests are skipped, and the
same kernels are exercised under the interpreter by ``test_attention.py``. Run on the device with
``pytest tests/test_attention_gpu.py -m "gpu and not slow" -s`` (well under a minute, mostly
compilation); ``-m gpu`` adds the throughput sweep over head dims 64/128, S 4k..16k, causal or not.
"""

from __future__ import annotations

import math

import pytest
import torch

import ceiling
from ceiling.backends import gpu_vendor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_vendor() is None, reason="needs a CUDA or ROCm GPU; interpreted in test_attention.py"),
]


def _sdpa_ref(q, k, v, causal, bias=None):
    """float32 SDPA on (batch, seq, heads, dim) inputs (math backend, GQA expanded)."""
    group = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    return torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=bias, is_causal=causal).transpose(1, 2)


@pytest.mark.parametrize("head_dim,causal", [(64, False), (128, True), (80, True)])
def test_matches_sdpa_with_gradients(head_dim, causal):
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(2, 1000, 8, head_dim, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(2, 1000, 2, head_dim, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(2, 1000, 2, head_dim, device=dev, dtype=dt, requires_grad=True)
    bias = torch.randn(1, 8, 1000, 1000, device=dev, dtype=torch.float32, requires_grad=True)
    out = ceiling.attention(q, k, v, causal=causal, bias=bias)
    do = torch.randn_like(out)
    out.backward(do)
    ours = [out, q.grad, k.grad, v.grad, bias.grad]
    for t in (q, k, v, bias):
        t.grad = None
    mask = None
    if causal:
        mask = torch.ones(1000, 1000, dtype=torch.bool, device=dev).tril().logical_not()
    ref_bias = bias if mask is None else bias.masked_fill(mask, -math.inf)
    ref = _sdpa_ref(q, k, v, False, ref_bias)
    ref.backward(do.float())
    for name, a, b in zip(("out", "dq", "dk", "dv", "dbias"), ours, (ref, q.grad, k.grad, v.grad, bias.grad)):
        assert torch.isfinite(a).all(), name
        err = (a.float() - b.float()).abs().max().item()
        assert err <= 2e-2 * max(1.0, b.abs().max().item()), f"{name}: {err}"


def _tflops(flops, ms):
    return flops / ms / 1e9


_QUICK = [(128, 8192, False), (128, 8192, True), (64, 8192, False)]
_SWEEP = [(d, s, c) for d in (64, 128) for s in (4096, 8192, 16384) for c in (False, True) if (d, s, c) not in _QUICK]


@pytest.mark.parametrize("head_dim,seq,causal", _QUICK + [pytest.param(*p, marks=pytest.mark.slow) for p in _SWEEP])
def test_throughput(head_dim, seq, causal):
    """Prints forward and backward TFLOP/s (FlashAttention convention) next to PyTorch SDPA."""
    import triton

    torch.manual_seed(0)
    batch, heads = max(1, 16384 // seq) * 2, 2048 // head_dim
    q, k, v = (torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    out = ceiling.attention(q, k, v, causal=causal)
    do = torch.randn_like(out)
    fwd = triton.testing.do_bench(lambda: ceiling.attention(q, k, v, causal=causal), warmup=25, rep=100)
    bwd = triton.testing.do_bench(lambda: out.backward(do, retain_graph=True), warmup=25, rep=100)
    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    sdpa_fwd = triton.testing.do_bench(
        lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal), warmup=25, rep=100)
    print(f"\nattention d={head_dim} s={seq} b={batch} h={heads} causal={causal}: "
          f"fwd {fwd:.3f} ms {_tflops(flops, fwd):.0f} TF/s, bwd {bwd:.3f} ms {_tflops(2.5 * flops, bwd):.0f} TF/s; "
          f"sdpa fwd {sdpa_fwd:.3f} ms {_tflops(flops, sdpa_fwd):.0f} TF/s")
    assert fwd > 0 and bwd > 0
