"""The TPU GEMM exported for TPU without one: each shipped config lowered through Pallas's Mosaic
lowering (block-shape and op lowering rules) and serialized, with its blocks, grid, VMEM use
against the generation's budgets and whether the lowering passed (``ceiling inspect gemm
--target tpu-v5e``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ceiling import tables
from ceiling.tpu.gemm import kernel_dtypes, pallas_gemm
from ceiling.tpu.gemm_rules import check_config
from ceiling.tpu.generations import generation
from ceiling.tpu.vmem import vmem_limit_bytes


def shipped(target: str, dtype: Any = "bfloat16") -> list[dict]:
    """The table entries of ``target`` for ``dtype``'s kernel dtype, in the table's order."""
    kdtype, _ = kernel_dtypes(dtype, dtype)
    entries = tables.read(tables.path("tpu", generation(target).target, "gemm"))["entries"]
    return [e for e in entries if tables.pinned(e).get("kernel_dtype") == kdtype]


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
    rows, seen = [], set()
    for entry in shipped(target, dtype):
        config = entry["config"]
        if (key := tuple(config.values())) in seen:
            continue
        seen.add(key)
        report = export_for_tpu(target, dtype, config, m=2 * config["bm"], n=2 * config["bn"], k=2 * config["bk"])
        report["provenance"] = f"{entry['source']}: {entry.get('why', '')}"
        rows.append(report)
    return rows
