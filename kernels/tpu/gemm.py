"""GEMM for TPU v5e, v5p and v6e in JAX Pallas (Mosaic TPU): a grid of (batch?, M/bm, N/bn, K/bk)
blocks with a float32 VMEM accumulator over the K axis (sequential, last; the others parallel, so
megacore chips split them), the epilogue (bias, activation with its own float32 erf, cast) at the
last K step; shapes no block divides zero-padded in the wrapper, float16 widened to float32 (no TPU
matmul path). Its config hooks (the table's size class fitted to the problem) and launchers;
``docs/gemm.md`` says more, :mod:`ceiling.tpu.gemm_export` lowers the shipped configs.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ceiling.constants import SQRT1_2
from ceiling.tpu.gemm_rules import check_config, copied, vmem_estimate
from ceiling.tpu.vmem import dtype_name, sublane_multiple, vmem_limit_bytes
from ceiling.tpu.generations import DEFAULT_TARGET, LANES, attached_tpu, generation

# --------------------------------------------------------------------------- kernel


def _erf(x):
    """erf(x) in float32 from XLA's rational approximation (clamped where
    erf is +-1 to float32 precision)."""
    alpha = (0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861, 0.18520832239976145, 1.128379143519084)
    beta = (
        -1.1791602954361697e-7,
        0.000023547966471313185,
        0.0010179625278914885,
        0.014070470171167667,
        0.11098505178285362,
        0.49746925110067538,
        1.0,
    )
    x = jnp.clip(x, -3.7439211627767994, 3.7439211627767994)
    x2 = x * x
    p = jnp.full_like(x, alpha[0])
    for c in alpha[1:]:
        p = p * x2 + c
    q = jnp.full_like(x, beta[0])
    for c in beta[1:]:
        q = q * x2 + c
    return x * p / q


def _activate(z, activation):
    if activation is None:
        return z
    if activation == "relu":
        return jnp.maximum(z, 0.0)
    if activation == "gelu":
        return 0.5 * z * (1.0 + _erf(z * SQRT1_2))
    if activation == "silu":
        # z * sigmoid(z); exp(-z) overflowing to inf for very negative z gives -0.
        return z / (1.0 + jnp.exp(-z))
    raise ValueError(activation)


def _gemm_kernel(*refs, has_bias, activation, k_axis, precision):
    if has_bias:
        a_ref, b_ref, bias_ref, o_ref, acc_ref = refs
    else:
        (a_ref, b_ref, o_ref, acc_ref), bias_ref = refs, None
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32, precision=precision)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def _finalize():
        z = acc_ref[...]
        if bias_ref is not None:
            z = z + bias_ref[...]  # (1, bn) float32, broadcast over rows
        o_ref[...] = _activate(z, activation).astype(o_ref.dtype)


def _squeezed():
    return pl.Squeezed() if hasattr(pl, "Squeezed") else None


def pallas_gemm(
    a,
    b,
    bias,
    *,
    bm: int,
    bn: int,
    bk: int,
    activation: str | None,
    out_dtype,
    vmem_limit: int,
    interpret: Any = False,
):
    """The pallas_call on padded operands: ``a`` (M, K) or (B, M, K), ``b`` (K, N)
    or (B, K, N) with every dim a block multiple, ``bias`` (1, N) float32 or None."""
    batched = a.ndim == 3
    m, k = a.shape[-2:]
    n = b.shape[-1]
    grid = (m // bm, n // bn, k // bk)
    if batched:
        grid = (a.shape[0], *grid)
        sq = _squeezed()
        a_spec = pl.BlockSpec((sq, bm, bk), lambda z, i, j, kk: (z, i, kk))
        b_spec = pl.BlockSpec((sq, bk, bn), lambda z, i, j, kk: (z, kk, j))
        bias_spec = pl.BlockSpec((1, bn), lambda z, i, j, kk: (0, j))
        o_spec = pl.BlockSpec((sq, bm, bn), lambda z, i, j, kk: (z, i, j))
        out_shape = (a.shape[0], m, n)
    else:
        a_spec = pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk))
        b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))
        bias_spec = pl.BlockSpec((1, bn), lambda i, j, kk: (0, j))
        o_spec = pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))
        out_shape = (m, n)
    in_specs = [a_spec, b_spec] + ([bias_spec] if bias is not None else [])
    operands = (a, b) + ((bias,) if bias is not None else ())
    precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    kernel = functools.partial(
        _gemm_kernel, has_bias=bias is not None, activation=activation, k_axis=len(grid) - 1, precision=precision
    )
    batch = a.shape[0] if batched else 1
    out_itemsize = jnp.dtype(out_dtype).itemsize
    cost = pl.CostEstimate(
        flops=2 * batch * m * n * k,
        transcendentals=batch * m * n if activation == "silu" else 0,
        bytes_accessed=a.size * a.dtype.itemsize + b.size * b.dtype.itemsize + batch * m * n * out_itemsize,
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype),
        grid=grid,
        in_specs=in_specs,
        out_specs=o_spec,
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel",) * (len(grid) - 1) + ("arbitrary",),
            vmem_limit_bytes=vmem_limit,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name=f"ceiling_gemm_{bm}x{bn}x{bk}",
    )(*operands)



# --------------------------------------------------------------------------- configs


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _fit(dim: int, block: int, align: int) -> int:
    """The block that covers ``dim`` in as many steps as ``block`` would, with
    the least padding: split ``dim`` evenly, then round up to ``align``."""
    steps = -(-dim // block)
    return min(block, _round_up(-(-dim // steps), align))


def kernel_dtypes(dtype: Any, out_dtype: Any) -> tuple[str, str]:
    """(operand, output) dtypes inside the kernel: float16 runs as float32."""
    widen = {"float16": "float32"}
    name, out = dtype_name(dtype), dtype_name(out_dtype)
    return widen.get(name, name), widen.get(out, out)


def fit(base: dict, target: str, kdtype: str, kout: str, m: int, n: int, k: int, batch: int = 1) -> dict[str, int]:
    """The table's blocks fitted to an (m, n, k) problem on ``target``: even splits, lane dims
    aligned to the MXU where the dim allows, and at least two parallel blocks on megacore chips
    when the shape allows."""
    gen = generation(target)
    rows = max(sublane_multiple(kdtype), sublane_multiple(kout))

    def fit_lanes(dim: int, block: int) -> int:
        # MXU-wide blocks (256 on v6e) unless they cost more padding than 128-wide ones.
        narrow = _fit(dim, block, LANES)
        if block % gen.mxu_size or dim < gen.mxu_size:
            return narrow
        wide = _fit(dim, block, gen.mxu_size)
        return wide if _round_up(dim, wide) <= _round_up(dim, narrow) else narrow

    bm = _fit(m, base["bm"], rows)
    bn = fit_lanes(n, base["bn"])
    bk = fit_lanes(k, base["bk"])
    if gen.tensorcores > 1 and batch * (-(-m // bm)) * (-(-n // bn)) < gen.tensorcores:
        # Megacore splits only parallel axes: give it two blocks to split.
        if n > LANES:
            bn = _round_up(-(-n // 2), LANES)
        elif m > rows:
            bm = _round_up(-(-m // 2), rows)
    return {"bm": bm, "bn": bn, "bk": bk}


def target(problem, user=None) -> str:
    """The generation whose tables and VMEM budget apply: the attached TPU's, else tpu-v5e."""
    return attached_tpu() or DEFAULT_TARGET


def resolve(problem, impl, user):
    return resolve_for(problem, user, target(problem))


def resolve_for(problem, user, target: str):
    """The blocks ``problem`` runs with on ``target``: ``config=`` as given (bm, bn and bk
    together), else the table's size class fitted to the problem; checked once by the kernel's
    rules (:mod:`ceiling.tpu.gemm_rules`, which name the rule a config breaks)."""
    from ceiling import tables
    from ceiling.spaces.config import Config

    kdtype, kout = kernel_dtypes(problem.dtype, problem.out_dtype)
    if user is not None:
        config = copied(user)
        check_config(config, kdtype, kout, target, problem.bias_dtype is not None)
        return Config(config, "gemm", target, "config=")
    features = {**problem.features(), "kernel_dtype": kdtype}
    found = tables.lookup("tpu", "gemm", None, generation(target).target, features)
    batch = 1 if problem.b_shared else (problem.batch or 1)
    config = fit(found.config, target, kdtype, kout, problem.rows, problem.n, problem.k, batch)
    check_config(config, kdtype, kout, target)  # a shipped block must fit with a bias too
    return Config(config, "gemm", target, found.source + ", fitted to the problem")


# --------------------------------------------------------------------------- launch


def default_interpret() -> Any:
    """False on a TPU; elsewhere the TPU interpret mode (simulated VMEM, DMAs and
    semaphores, uninitialized memory poisoned with NaN) where this JAX has it,
    else the generic HLO interpreter."""
    if attached_tpu() is not None:
        return False
    if hasattr(pltpu, "InterpretParams"):
        return pltpu.InterpretParams()
    return True


_pallas_gemm_jit = jax.jit(
    pallas_gemm, static_argnames=("bm", "bn", "bk", "activation", "out_dtype", "vmem_limit", "interpret")
)


def _launch(problem, config, a, b, bias, target: str, interpret: Any):
    out_dtype = jnp.dtype(problem.out_dtype)
    if 0 in problem.out_shape:
        return jnp.zeros(problem.out_shape, out_dtype)
    if problem.k == 0:  # an empty sum: the epilogue of a zero accumulator
        from ceiling.gemm.reference import epilogue_jax

        return epilogue_jax(jnp.zeros(problem.out_shape, jnp.float32), bias, problem.activation).astype(out_dtype)
    kdtype, kout = kernel_dtypes(problem.dtype, problem.out_dtype)
    bm, bn, bk = config["bm"], config["bn"], config["bk"]
    a = a.astype(kdtype)
    b = b.astype(kdtype)
    lead = None
    if problem.b_shared:  # one weight for the batch: fold the batch into M
        lead = a.shape[0]
        a = a.reshape(-1, a.shape[-1])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    estimate = vmem_estimate(bm, bn, bk, kdtype, kout, bias is not None)

    mp, np_, kp = _round_up(m, bm), _round_up(n, bn), _round_up(k, bk)
    lead_pad = [(0, 0)] * (a.ndim - 2)
    if (mp, kp) != (m, k):
        a = jnp.pad(a, lead_pad + [(0, mp - m), (0, kp - k)])
    if (kp, np_) != (k, n):
        b = jnp.pad(b, [(0, 0)] * (b.ndim - 2) + [(0, kp - k), (0, np_ - n)])
    bias2d = None
    if bias is not None:
        bias2d = jnp.pad(bias.astype(jnp.float32), (0, np_ - n)).reshape(1, np_)

    out = _pallas_gemm_jit(
        a,
        b,
        bias2d,
        bm=bm,
        bn=bn,
        bk=bk,
        activation=problem.activation,
        out_dtype=jnp.dtype(kout),
        vmem_limit=vmem_limit_bytes(estimate, target),
        interpret=interpret,
    )
    out = out[..., :m, :n]
    if lead is not None:
        out = out.reshape(lead, -1, n)
    return out.astype(out_dtype)


def forward_jax(problem, config, a, b, bias):
    return (_launch(problem, config, a, b, bias, config.target, default_interpret()),)


def forward(problem, config, a, b, bias):
    """The same on torch tensors: they are copied to JAX arrays, run, and the result copied back
    to ``a``'s device (PyTorch cannot hand a TPU its memory)."""
    (out,) = forward_jax(problem, config, _torch_to_jax(a), _torch_to_jax(b),
                         None if bias is None else _torch_to_jax(bias))
    return (_jax_to_torch(out, a.device),)


def gemm_jax(a, b, bias=None, activation=None, out_dtype=None, config=None, *, target=None, interpret=None):
    """``activation(a @ b + bias)`` on JAX arrays for a kernel built on this one (the triangle
    multiplication's contraction): the problem checked, its blocks resolved for ``target``
    (default: the attached TPU, else tpu-v5e), run in ``interpret`` mode (default: native on a
    TPU, interpreted elsewhere)."""
    from ceiling.gemm.spec import check

    problem = check(a, b, bias, activation, out_dtype)
    target = target or attached_tpu() or DEFAULT_TARGET
    config = resolve_for(problem, config, target)
    return _launch(problem, config, a, b, bias, target, default_interpret() if interpret is None else interpret)


def _torch_to_jax(t):
    import ml_dtypes
    import torch

    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    return jnp.asarray(t.numpy())


def _jax_to_torch(x, device):
    import torch

    host = np.asarray(x)
    if host.dtype == jnp.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(host.copy()).to(device)
