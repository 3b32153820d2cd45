"""GEMM for TPU v5e, v5p and v6e in JAX Pallas (Mosaic TPU).

``out = activation(a @ b + bias)``, blocked the usual Pallas TPU way:

* the grid is (batch?, M/bm, N/bn, K/bk); the pipeline DMAs an (bm, bk) block of
  ``a`` and a (bk, bn) block of ``b`` into VMEM per step, double-buffered;
* a float32 (bm, bn) VMEM scratch accumulates over the k axis: zeroed at k == 0,
  and at the last k the epilogue (bias in f32, activation, cast) writes the
  output block once;
* the k axis is "arbitrary" (sequential, last, so the output block is revisited
  only on consecutive steps) and the others "parallel", which lets megacore
  chips (v5p) split them across their two TensorCores.

Shapes no block divides are zero-padded in the wrapper and the result sliced:
zeros along K add nothing to the dot, and padded rows/columns are cut off.
dtypes: bfloat16 and float32 run natively on the MXU (float32 at
``Precision.HIGHEST``, i.e. full float32 products, not one bf16 pass);
float16 has no TPU matmul path, so it is widened to float32 in the wrapper
(exact) and the output rounded back to float16 there.

The exact gelu needs erf. Pallas lowers ``lax.erf`` to ``math.erf``, which
``jax.export`` accepts but whose legalization by libtpu's Mosaic compiler cannot
be checked without a TPU; the epilogue therefore evaluates erf itself with
XLA's float32 rational approximation (multiplies, adds, one divide, a clamp;
max abs error 3.1e-7 against float64), which every generation supports.

Entry points: ``gemm_jax`` on JAX arrays (what ``kernels.gemm.jax_op`` calls for
forward and backward), ``gemm`` on torch tensors, ``select_config``,
``inspect_tpu`` for the export-based static facts of the shipped configs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels.tpu import gemm_rules
from kernels.tpu.gemm_rules import ConfigError, check_config, copied
from kernels.tpu.vmem import dtype_name, sublane_multiple, vmem_limit_bytes
from kernels.tpu.generations import DEFAULT_TARGET, LANES, TARGETS, attached_tpu, generation

CONFIGS_PATH = Path(__file__).parent / "configs" / "gemm.json"

__all__ = ["gemm", "gemm_jax", "select_config", "inspect_tpu", "load_configs", "ConfigError", "TARGETS"]


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
        return 0.5 * z * (1.0 + _erf(z * 0.7071067811865476))
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


@functools.cache
def load_configs() -> dict:
    return json.loads(CONFIGS_PATH.read_text())


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


def select_config(target: str, dtype: Any, out_dtype: Any, m: int, n: int, k: int, batch: int = 1) -> dict[str, int]:
    """Block sizes for an (m, n, k) problem on ``target``: the tuned entry for
    the problem's size class, fitted to the shape (even splits, lane dims
    aligned to the MXU where the dim allows), with at least two parallel
    blocks on megacore chips when the shape allows."""
    gen = generation(target)
    kdtype, kout = kernel_dtypes(dtype, out_dtype)
    table = load_configs()[target][kdtype]
    base = table["fallback"]
    for entry in table["entries"]:
        if m >= entry["min_m"] and n >= entry["min_n"] and k >= entry["min_k"]:
            base = entry
            break
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
    config = {"bm": bm, "bn": bn, "bk": bk}
    check_config(config, kdtype, kout, target)
    return config


# --------------------------------------------------------------------------- wrapper


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


def gemm_jax(a, b, bias=None, activation=None, out_dtype=None, config=None, *, target=None, interpret=None):
    """``activation(a @ b + bias)`` on JAX arrays with the Pallas TPU kernel.

    Args follow ``kernels.gemm``. ``config``: {"bm", "bn", "bk"} overriding the
    tuned table (checked by ``gemm_rules.check_config``). ``target``: the
    generation whose configs and VMEM budget apply; defaults to the attached TPU,
    else tpu-v5e. ``interpret``: as ``pallas_call``'s; defaults to native on a
    TPU and interpret mode elsewhere.
    """
    from kernels.gemm.spec import check

    problem = check(a, b, bias, activation, out_dtype)
    target = target or attached_tpu() or DEFAULT_TARGET
    interpret = default_interpret() if interpret is None else interpret
    kdtype, kout = kernel_dtypes(problem.dtype, problem.out_dtype)
    out_dtype = jnp.dtype(problem.out_dtype)

    a = a.astype(kdtype)
    b = b.astype(kdtype)
    lead = None
    if problem.b_shared:  # one weight for the batch: fold the batch into M
        lead = a.shape[0]
        a = a.reshape(-1, a.shape[-1])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1

    config = select_config(target, kdtype, kout, m, n, k, batch) if config is None else copied(config)
    estimate = check_config(config, kdtype, kout, target, bias is not None)
    bm, bn, bk = config["bm"], config["bn"], config["bk"]

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
        activation=activation,
        out_dtype=jnp.dtype(kout),
        vmem_limit=vmem_limit_bytes(estimate, target),
        interpret=interpret,
    )
    out = out[..., :m, :n]
    if lead is not None:
        out = out.reshape(lead, -1, n)
    return out.astype(out_dtype)


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


def gemm(a, b, bias=None, activation=None, out_dtype=None, config=None, *, target=None, interpret=None):
    """The same on torch tensors: they are copied to JAX arrays, run, and the
    result copied back to ``a``'s device (PyTorch cannot hand a TPU its memory)."""
    from kernels.gemm.spec import check

    problem = check(a, b, bias, activation, out_dtype)
    out = gemm_jax(
        _torch_to_jax(a),
        _torch_to_jax(b),
        None if bias is None else _torch_to_jax(bias),
        activation,
        problem.out_dtype,
        config,
        target=target,
        interpret=interpret,
    )
    return _jax_to_torch(out, a.device)


# --------------------------------------------------------------------------- inspection


def _export(fn, *shapes) -> tuple[bool, str, int]:
    """Lower ``fn`` for TPU through Pallas's Mosaic lowering (block-shape rules,
    op lowering rules) and serialize it; needs no TPU. Mosaic's layout passes
    and the VMEM allocation run only in libtpu and are not covered."""
    try:
        exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*shapes)
    except Exception as exc:  # noqa: BLE001 - the report carries the lowering error
        return False, f"{type(exc).__name__}: {exc}".splitlines()[0][:400], 0
    text = exported.mlir_module()
    if "tpu_custom_call" not in text:
        return False, "the exported module has no tpu_custom_call", 0
    return True, "", len(exported.mlir_module_serialized)


def export_for_tpu(
    target: str,
    dtype: Any,
    config: dict,
    *,
    m: int,
    n: int,
    k: int,
    batch: int | None = None,
    activation: str | None = "gelu",
    has_bias: bool = True,
    out_dtype: Any = None,
) -> dict:
    """Export the kernel for one padded problem on ``target``; the facts of it."""
    kdtype, kout = kernel_dtypes(dtype, out_dtype or dtype)
    estimate = check_config(config, kdtype, kout, target, has_bias)
    bm, bn, bk = config["bm"], config["bn"], config["bk"]
    lead = () if batch is None else (batch,)
    shapes = [jax.ShapeDtypeStruct((*lead, m, k), kdtype), jax.ShapeDtypeStruct((*lead, k, n), kdtype)]
    if has_bias:
        shapes.append(jax.ShapeDtypeStruct((1, n), jnp.float32))
    limit = vmem_limit_bytes(estimate, target)

    def fn(a, b, *rest):
        return pallas_gemm(
            a,
            b,
            rest[0] if rest else None,
            bm=bm,
            bn=bn,
            bk=bk,
            activation=activation,
            out_dtype=jnp.dtype(kout),
            vmem_limit=limit,
            interpret=False,
        )

    ok, error, size = _export(fn, *shapes)
    gen = generation(target)
    grid = (*lead, m // bm, n // bn, k // bk)
    return {
        "target": target,
        "dtype": kdtype,
        "out_dtype": kout,
        "config": dict(config),
        "problem": {"batch": batch, "m": m, "n": n, "k": k},
        "blocks": {"a": (bm, bk), "b": (bk, bn), "bias": (1, bn) if has_bias else None, "out": (bm, bn), "accumulator": (bm, bn)},
        "grid": grid,
        "dimension_semantics": ("parallel",) * (len(grid) - 1) + ("arbitrary",),
        "epilogue": {"bias": has_bias, "activation": activation},
        "vmem_bytes": estimate.as_dict(),
        "vmem_limit_bytes": limit,
        "scoped_vmem_default_bytes": gen.scoped_vmem_default_bytes,
        "fits_scoped_default": estimate.total <= gen.scoped_vmem_default_bytes,
        "usable_vmem_bytes": gen.usable_vmem_bytes,
        "mxu_aligned": bn % gen.mxu_size == 0 and bk % gen.mxu_size == 0,
        "exported": ok,
        "export_error": error,
        "serialized_bytes": size,
    }


def inspect_tpu(target: str, dtype: Any = "bfloat16") -> list[dict]:
    """For each shipped config of ``target`` ("tpu-v5e", "tpu-v5p", "tpu-v6e")
    and ``dtype``, export the kernel (bias + exact gelu epilogue) for TPU on a
    problem of two blocks per axis and report block shapes, grid, VMEM use
    against the generation's budgets, and whether the Mosaic lowering passed."""
    kdtype, _ = kernel_dtypes(dtype, dtype)
    table = load_configs()[generation(target).target][kdtype]
    rows, seen = [], set()
    for entry in [*table["entries"], {**table["fallback"], "provenance": "fallback"}]:
        config = {key: entry[key] for key in ("bm", "bn", "bk")}
        if (key := tuple(config.values())) in seen:
            continue
        seen.add(key)
        report = export_for_tpu(target, dtype, config, m=2 * config["bm"], n=2 * config["bn"], k=2 * config["bk"])
        report["provenance"] = entry.get("provenance", "")
        rows.append(report)
    return rows


RULES = gemm_rules.RULES
