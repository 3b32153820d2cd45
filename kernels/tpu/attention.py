"""Flash attention for TPU v5e, v5p and v6e in JAX Pallas (Mosaic TPU), forward and backward
with an additive bias and its gradient, a boolean mask, GQA and bottom-right causal alignment:
the kernels (forward; dq; dk/dv summed over each GQA group in the grid; a dbias kernel for a bias
broadcast over some dimensions), the op's ``pallas`` implementation (``resolve``, ``forward``,
``backward`` and their JAX twins), the block table lookup fitted to short sequences
(``select_config``) and the Mosaic export of every shipped config (``inspect_tpu_attention``).
Their design: ``docs/attention.md``."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ceiling.errors import InputError
from ceiling.tpu.attention_rules import RULES, AttentionConfigError, blocks, check_config
from ceiling.tpu.gemm_rules import copied
from ceiling.tpu.vmem import dtype_name, sublane_multiple, vmem_limit_bytes
from ceiling.tpu.generations import DEFAULT_TARGET, LANES, TARGETS, attached_tpu, generation


__all__ = [
    "attention",
    "attention_jax",
    "attention_fwd",
    "attention_bwd",
    "attention_fwd_jax",
    "attention_bwd_jax",
    "select_config",
    "inspect_tpu_attention",
    "AttentionConfigError",
    "RULES",
    "TARGETS",
]

NT = (((1,), (1,)), ((), ()))  # a @ b^T
TN = (((0,), (0,)), ((), ()))  # a^T @ b
NEG_INF = float("-inf")


# --------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Plan:
    """Everything static about one call: shapes (padded and not), blocks,
    broadcast pattern of bias and mask, and how to compile."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    k_len: int
    q_pad: int  # padded q_len, a multiple of both query blocks
    k_pad: int
    head_dim: int
    d_pad: int  # head_dim padded to a multiple of 128
    causal: bool
    scale: float
    kdtype: str  # kernel operand dtype: bfloat16 or float32
    bias_dtype: str | None  # kernel bias dtype: bfloat16 or float32
    bias_bcast: tuple[bool, bool, bool, bool] | None  # per (batch, heads, q, k): broadcast?
    mask_bcast: tuple[bool, bool, bool, bool] | None
    block_q: int
    block_k: int
    block_q_bwd: int
    block_k_bwd: int
    target: str
    vmem_limits: tuple[int, int, int]  # fwd, dq (and dbias), dkv
    interpret: Any

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def offset(self) -> int:
        return self.k_len - self.q_len

    @property
    def precision(self):
        return lax.Precision.HIGHEST if self.kdtype == "float32" else None


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _last_row(i, bq, q_len):
    """Last real query row of q block ``i`` (rows past q_len are padding)."""
    return jnp.minimum((i + 1) * bq, q_len) - 1


def _runs(plan: Plan, i, j, bq, bk):
    """Whether q block i and kv block j share a visible (query, key) pair
    under the causal mask: the block's first key is left of its last row's
    diagonal."""
    return j * bk <= _last_row(i, bq, plan.q_len) + plan.offset


def _last_kv_block(plan: Plan, i, bq, bk):
    """The last kv block q block i needs (0 when it needs none)."""
    return lax.div(jnp.maximum(_last_row(i, bq, plan.q_len) + plan.offset, 0), bk)


def _first_q_block(plan: Plan, j, bq, bk):
    """The first q block that sees a key of kv block j (clamped to the grid)."""
    nq = plan.q_pad // bq
    return jnp.minimum(lax.div(jnp.maximum(j * bk - plan.offset, 0), bq), nq - 1)


def _lanes(x, n):
    """A lane-replicated (rows, 128) array stretched to (rows, n)."""
    return x if n == LANES else jnp.tile(x, (1, n // LANES))


def _sq():
    return pl.Squeezed() if hasattr(pl, "Squeezed") else None


def _pair_spec(bcast, bq, bk, index):
    """BlockSpec of a bias-like (B?, H?, Sq?, Sk?) array: a broadcast batch or
    head dim always reads index 0; a broadcast q or k dim is a block of 1 (the
    whole array dim, which the (8, 128) rule allows)."""
    bb, bh, bqd, bkd = bcast
    shape = (_sq(), _sq(), 1 if bqd else bq, 1 if bkd else bk)

    def index_map(*grid):
        b, h, i, j = index(*grid)
        return (0 if bb else b, 0 if bh else h, 0 if bqd else i, 0 if bkd else j)

    return pl.BlockSpec(shape, index_map)


# --------------------------------------------------------------------------- kernels


def _scores(plan: Plan, q, k, bias_ref, mask_ref, i, j, bq, bk):
    """scale * q @ k^T + bias in float32, -inf where not visible. The mask (a 0 / -inf tile)
    selects -inf, where adding it would keep a NaN score (a NaN k or bias behind a masked key)."""
    s = lax.dot_general(q, k, NT, preferred_element_type=jnp.float32, precision=plan.precision) * plan.scale
    if bias_ref is not None:
        s = s + bias_ref[...].astype(jnp.float32)
    if mask_ref is not None:
        s = jnp.where(mask_ref[...] == 0, s, NEG_INF)
    need_rows = plan.q_pad != plan.q_len
    need_cols = plan.k_pad != plan.k_len
    if plan.causal or need_rows or need_cols:
        row = i * bq + lax.broadcasted_iota(jnp.int32, (bq, bk), 0)
        col = j * bk + lax.broadcasted_iota(jnp.int32, (bq, bk), 1)
        visible = None

        def both(a, b):
            return b if a is None else jnp.logical_and(a, b)

        if need_rows:
            visible = both(visible, row < plan.q_len)
        if need_cols:
            visible = both(visible, col < plan.k_len)
        if plan.causal:
            visible = both(visible, col <= row + plan.offset)
        s = jnp.where(visible, s, NEG_INF)
    return s


def _when_runs(plan: Plan, i, j, bq, bk, body):
    if plan.causal:
        pl.when(_runs(plan, i, j, bq, bk))(body)
    else:
        body()


def _split_refs(refs, has_bias, has_mask):
    refs = list(refs)
    bias_ref = refs.pop(0) if has_bias else None
    mask_ref = refs.pop(0) if has_mask else None
    return bias_ref, mask_ref, refs


def _fwd_kernel(q_ref, k_ref, v_ref, *refs, plan: Plan):
    bias_ref, mask_ref, (o_ref, lse_ref, m_ref, l_ref, acc_ref) = _split_refs(
        refs, plan.bias_bcast is not None, plan.mask_bcast is not None
    )
    bq, bk, d = plan.block_q, plan.block_k, plan.d_pad
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def _step():
        s = _scores(plan, q_ref[...], k_ref[...], bias_ref, mask_ref, i, j, bq, bk)
        m_prev, l_prev = m_ref[...], l_ref[...]
        m_next = jnp.maximum(m_prev, jnp.max(s, axis=1)[:, None])  # (bq, 128)
        # A row that has seen only -inf keeps max 0 so exp(-inf - 0) = 0, not NaN.
        m_safe = jnp.where(m_next == NEG_INF, 0.0, m_next)
        p = jnp.exp(s - _lanes(m_safe, bk))
        alpha = jnp.exp(m_prev - m_safe)
        l_ref[...] = alpha * l_prev + jnp.sum(p, axis=1)[:, None]
        m_ref[...] = m_next
        v = v_ref[...]
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32, precision=plan.precision)
        acc_ref[...] = acc_ref[...] * _lanes(alpha, d) + pv

    _when_runs(plan, i, j, bq, bk, _step)

    @pl.when(j == pl.num_programs(3) - 1)
    def _finalize():
        l, m = l_ref[...], m_ref[...]
        empty = l == 0.0  # the row saw no key
        inv = jnp.where(empty, 0.0, 1.0 / jnp.where(empty, 1.0, l))
        o_ref[...] = (acc_ref[...] * _lanes(inv, d)).astype(o_ref.dtype)
        lse_ref[...] = jnp.where(empty, NEG_INF, m + jnp.log(jnp.where(empty, 1.0, l)))


def _probs_and_ds(plan: Plan, q, k, v, do, lse, delta, bias_ref, mask_ref, i, j, bq, bk):
    """(p, ds) of one block from the saved lse; delta is (bq, 128) or (bq, 1)."""
    s = _scores(plan, q, k, bias_ref, mask_ref, i, j, bq, bk)
    lse_safe = jnp.where(lse == NEG_INF, 0.0, lse)
    # a hidden pair's P and dS are 0, also in a row whose lse or delta is NaN
    hidden = s == NEG_INF
    p = jnp.where(hidden, 0.0, jnp.exp(s - _lanes(lse_safe, bk)))
    dp = lax.dot_general(do, v, NT, preferred_element_type=jnp.float32, precision=plan.precision)
    delta = _lanes(delta, bk) if delta.shape[1] == LANES else delta
    return p, jnp.where(hidden, 0.0, p * (dp - delta))


def _row_delta(do_ref, o_ref):
    """rowsum(do * o) in float32, (bq, 1)."""
    return jnp.sum(do_ref[...].astype(jnp.float32) * o_ref[...].astype(jnp.float32), axis=1, keepdims=True)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, o_ref, lse_ref, *refs, plan: Plan, write_dbias: bool):
    bias_ref, mask_ref, rest = _split_refs(refs, plan.bias_bcast is not None, plan.mask_bcast is not None)
    if write_dbias:
        dq_ref, dbias_ref, acc_ref, delta_ref = rest
    else:
        (dq_ref, acc_ref, delta_ref), dbias_ref = rest, None
    bq, bk = plan.block_q_bwd, plan.block_k_bwd
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        delta_ref[...] = jnp.zeros(delta_ref.shape, jnp.float32) + _row_delta(do_ref, o_ref)

    def _step():
        k = k_ref[...]
        _, ds = _probs_and_ds(
            plan, q_ref[...], k, v_ref[...], do_ref[...], lse_ref[...], delta_ref[...], bias_ref, mask_ref, i, j, bq, bk
        )
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32, precision=plan.precision)
        if dbias_ref is not None:
            dbias_ref[...] = ds.astype(dbias_ref.dtype)

    if plan.causal:
        runs = _runs(plan, i, j, bq, bk)
        pl.when(runs)(_step)
        if dbias_ref is not None:

            @pl.when(jnp.logical_not(runs))
            def _skipped():  # every dbias block is written once, skipped ones as zeros
                dbias_ref[...] = jnp.zeros(dbias_ref.shape, dbias_ref.dtype)

    else:
        _step()

    @pl.when(j == pl.num_programs(3) - 1)
    def _finalize():
        dq_ref[...] = (acc_ref[...] * plan.scale).astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, o_ref, lse_ref, *refs, plan: Plan):
    bias_ref, mask_ref, (dk_ref, dv_ref, dk_acc, dv_acc) = _split_refs(
        refs, plan.bias_bcast is not None, plan.mask_bcast is not None
    )
    bq, bk = plan.block_q_bwd, plan.block_k_bwd
    j, g, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)

    @pl.when(jnp.logical_and(g == 0, i == 0))
    def _init():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    def _step():
        q, do = q_ref[...], do_ref[...]
        p, ds = _probs_and_ds(
            plan, q, k_ref[...], v_ref[...], do, lse_ref[...], _row_delta(do_ref, o_ref), bias_ref, mask_ref, i, j, bq, bk
        )
        dv_acc[...] += lax.dot_general(
            p.astype(do.dtype), do, TN, preferred_element_type=jnp.float32, precision=plan.precision
        )
        dk_acc[...] += lax.dot_general(
            ds.astype(q.dtype), q, TN, preferred_element_type=jnp.float32, precision=plan.precision
        )

    _when_runs(plan, i, j, bq, bk, _step)

    @pl.when(jnp.logical_and(g == pl.num_programs(3) - 1, i == pl.num_programs(4) - 1))
    def _finalize():
        dk_ref[...] = (dk_acc[...] * plan.scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _dbias_order(plan: Plan) -> tuple[int, ...]:
    """Logical axes (0 batch, 1 heads, 2 q blocks, 3 kv blocks) in grid order:
    the bias's kept dims first, its broadcast (summed) dims last."""
    kept = tuple(a for a in range(4) if not plan.bias_bcast[a])
    return kept + tuple(a for a in range(4) if plan.bias_bcast[a])


def _dbias_kernel(q_ref, k_ref, v_ref, do_ref, o_ref, lse_ref, bias_ref, *refs, plan: Plan):
    mask_ref = refs[0] if plan.mask_bcast is not None else None
    dbias_ref, acc_ref = refs[-2:]
    bq, bk = plan.block_q_bwd, plan.block_k_bwd
    order = _dbias_order(plan)
    logical = [None] * 4
    for pos, axis in enumerate(order):
        logical[axis] = pl.program_id(pos)
    i, j = logical[2], logical[3]
    summed = [pos for pos, axis in enumerate(order) if plan.bias_bcast[axis]]
    first = functools.reduce(jnp.logical_and, [pl.program_id(p) == 0 for p in summed])
    last = functools.reduce(jnp.logical_and, [pl.program_id(p) == pl.num_programs(p) - 1 for p in summed])

    @pl.when(first)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def _step():
        _, ds = _probs_and_ds(
            plan,
            q_ref[...],
            k_ref[...],
            v_ref[...],
            do_ref[...],
            lse_ref[...],
            _row_delta(do_ref, o_ref),
            bias_ref,
            mask_ref,
            i,
            j,
            bq,
            bk,
        )
        if plan.bias_bcast[2]:
            ds = jnp.sum(ds, axis=0, keepdims=True)
        if plan.bias_bcast[3]:
            ds = jnp.sum(ds, axis=1, keepdims=True)
        acc_ref[...] += ds

    _when_runs(plan, i, j, bq, bk, _step)

    @pl.when(last)
    def _finalize():
        dbias_ref[...] = acc_ref[...].astype(dbias_ref.dtype)


# --------------------------------------------------------------------------- pallas calls


def _params(semantics, limit):
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=limit)


def _extra_inputs(plan: Plan, bias, mask, bq, bk, index):
    specs, operands = [], []
    if plan.bias_bcast is not None:
        specs.append(_pair_spec(plan.bias_bcast, bq, bk, index))
        operands.append(bias)
    if plan.mask_bcast is not None:
        specs.append(_pair_spec(plan.mask_bcast, bq, bk, index))
        operands.append(mask)
    return specs, operands


def _forward(plan: Plan, q, k, v, bias, mask):
    """(o (B, H, Sq_p, Dp), lse (B, H, Sq_p, 128) float32) on padded operands."""
    bq, bk, d, sq = plan.block_q, plan.block_k, plan.d_pad, _sq()
    grid = (plan.batch, plan.heads, plan.q_pad // bq, plan.k_pad // bk)
    group = plan.group

    def kv_block(i, j):
        return jnp.minimum(j, _last_kv_block(plan, i, bq, bk)) if plan.causal else j

    def logical(b, h, i, j):
        return b, h, i, kv_block(i, j)

    q_spec = pl.BlockSpec((sq, sq, bq, d), lambda b, h, i, j: (b, h, i, 0))
    kv_spec = pl.BlockSpec((sq, sq, bk, d), lambda b, h, i, j: (b, lax.div(h, group), kv_block(i, j), 0))
    lse_spec = pl.BlockSpec((sq, sq, bq, LANES), lambda b, h, i, j: (b, h, i, 0))
    extra_specs, extra = _extra_inputs(plan, bias, mask, bq, bk, logical)
    return pl.pallas_call(
        functools.partial(_fwd_kernel, plan=plan),
        out_shape=(
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct((plan.batch, plan.heads, plan.q_pad, LANES), jnp.float32),
        ),
        grid=grid,
        in_specs=[q_spec, kv_spec, kv_spec, *extra_specs],
        out_specs=(q_spec, lse_spec),
        scratch_shapes=[
            pltpu.VMEM((bq, LANES), jnp.float32),
            pltpu.VMEM((bq, LANES), jnp.float32),
            pltpu.VMEM((bq, d), jnp.float32),
        ],
        compiler_params=_params(("parallel", "parallel", "parallel", "arbitrary"), plan.vmem_limits[0]),
        cost_estimate=pl.CostEstimate(
            flops=4 * plan.batch * plan.heads * plan.q_pad * plan.k_pad * d // (2 if plan.causal else 1),
            transcendentals=plan.batch * plan.heads * plan.q_pad * plan.k_pad,
            bytes_accessed=2 * q.size * q.dtype.itemsize + 2 * k.size * k.dtype.itemsize,
        ),
        interpret=plan.interpret,
        name=f"ceiling_attention_fwd_{bq}x{bk}",
    )(q, k, v, *extra)


def _backward(plan: Plan, q, k, v, bias, mask, o, lse, do):
    """(dq, dk, dv, dbias or None) on padded operands; dbias has the padded
    bias's shape, summed over its broadcast dims, float32."""
    bq, bk, d, sq = plan.block_q_bwd, plan.block_k_bwd, plan.d_pad, _sq()
    nq, nk, group = plan.q_pad // bq, plan.k_pad // bk, plan.group
    has_bias = plan.bias_bcast is not None
    full_bias = has_bias and not any(plan.bias_bcast)

    # dq: grid (b, h, i, j); kv blocks past the diagonal are not fetched.
    def kv_block(i, j):
        return jnp.minimum(j, _last_kv_block(plan, i, bq, bk)) if plan.causal else j

    q_spec = pl.BlockSpec((sq, sq, bq, d), lambda b, h, i, j: (b, h, i, 0))
    kv_spec = pl.BlockSpec((sq, sq, bk, d), lambda b, h, i, j: (b, lax.div(h, group), kv_block(i, j), 0))
    lse_spec = pl.BlockSpec((sq, sq, bq, LANES), lambda b, h, i, j: (b, h, i, 0))
    extra_specs, extra = _extra_inputs(plan, bias, mask, bq, bk, lambda b, h, i, j: (b, h, i, kv_block(i, j)))
    out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
    out_specs = [q_spec]
    if full_bias:  # every (b, h, i, j) block of dbias written once, not clamped
        out_shape.append(jax.ShapeDtypeStruct(bias.shape, jnp.float32))
        out_specs.append(pl.BlockSpec((sq, sq, bq, bk), lambda b, h, i, j: (b, h, i, j)))
    dq_out = pl.pallas_call(
        functools.partial(_dq_kernel, plan=plan, write_dbias=full_bias),
        out_shape=tuple(out_shape),
        grid=(plan.batch, plan.heads, nq, nk),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, q_spec, lse_spec, *extra_specs],
        out_specs=tuple(out_specs),
        scratch_shapes=[pltpu.VMEM((bq, d), jnp.float32), pltpu.VMEM((bq, LANES), jnp.float32)],
        compiler_params=_params(("parallel", "parallel", "parallel", "arbitrary"), plan.vmem_limits[1]),
        interpret=plan.interpret,
        name=f"ceiling_attention_dq_{bq}x{bk}",
    )(q, k, v, do, o, lse, *extra)
    dq = dq_out[0]
    dbias = dq_out[1] if full_bias else None

    # dk/dv: grid (b, kv head, j, g, i); q blocks before the diagonal are not fetched.
    def q_block(j, i):
        return jnp.maximum(i, _first_q_block(plan, j, bq, bk)) if plan.causal else i

    qd_spec = pl.BlockSpec((sq, sq, bq, d), lambda b, hk, j, g, i: (b, hk * group + g, q_block(j, i), 0))
    kvd_spec = pl.BlockSpec((sq, sq, bk, d), lambda b, hk, j, g, i: (b, hk, j, 0))
    lsed_spec = pl.BlockSpec((sq, sq, bq, LANES), lambda b, hk, j, g, i: (b, hk * group + g, q_block(j, i), 0))
    extra_specs, extra = _extra_inputs(
        plan, bias, mask, bq, bk, lambda b, hk, j, g, i: (b, hk * group + g, q_block(j, i), j)
    )
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, plan=plan),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(plan.batch, plan.kv_heads, nk, group, nq),
        in_specs=[qd_spec, kvd_spec, kvd_spec, qd_spec, qd_spec, lsed_spec, *extra_specs],
        out_specs=(kvd_spec, kvd_spec),
        scratch_shapes=[pltpu.VMEM((bk, d), jnp.float32), pltpu.VMEM((bk, d), jnp.float32)],
        compiler_params=_params(
            ("parallel", "parallel", "parallel", "arbitrary", "arbitrary"), plan.vmem_limits[2]
        ),
        interpret=plan.interpret,
        name=f"ceiling_attention_dkv_{bq}x{bk}",
    )(q, k, v, do, o, lse, *extra)

    if has_bias and not full_bias:
        dbias = _broadcast_dbias(plan, q, k, v, bias, mask, o, lse, do)
    return dq, dk, dv, dbias


def _broadcast_dbias(plan: Plan, q, k, v, bias, mask, o, lse, do):
    bq, bk, d, sq = plan.block_q_bwd, plan.block_k_bwd, plan.d_pad, _sq()
    order = _dbias_order(plan)
    sizes = (plan.batch, plan.heads, plan.q_pad // bq, plan.k_pad // bk)
    group = plan.group

    def logical(*grid):
        idx = [None] * 4
        for pos, axis in enumerate(order):
            idx[axis] = grid[pos]
        return tuple(idx)

    q_spec = pl.BlockSpec((sq, sq, bq, d), lambda *g: (lambda b, h, i, j: (b, h, i, 0))(*logical(*g)))
    kv_spec = pl.BlockSpec((sq, sq, bk, d), lambda *g: (lambda b, h, i, j: (b, lax.div(h, group), j, 0))(*logical(*g)))
    lse_spec = pl.BlockSpec((sq, sq, bq, LANES), lambda *g: (lambda b, h, i, j: (b, h, i, 0))(*logical(*g)))
    extra_specs, extra = _extra_inputs(plan, bias, mask, bq, bk, logical)
    out_spec = extra_specs[0]  # dbias has the bias's blocks
    rows = 1 if plan.bias_bcast[2] else bq
    cols = 1 if plan.bias_bcast[3] else bk
    summed = sum(plan.bias_bcast)
    return pl.pallas_call(
        functools.partial(_dbias_kernel, plan=plan),
        out_shape=jax.ShapeDtypeStruct(bias.shape, jnp.float32),
        grid=tuple(sizes[a] for a in order),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, q_spec, lse_spec, *extra_specs],
        out_specs=out_spec,
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32)],
        compiler_params=_params(("parallel",) * (4 - summed) + ("arbitrary",) * summed, plan.vmem_limits[1]),
        interpret=plan.interpret,
        name=f"ceiling_attention_dbias_{bq}x{bk}",
    )(q, k, v, do, o, lse, *extra)


# --------------------------------------------------------------------------- custom VJP


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(plan: Plan, q, k, v, bias, mask):
    return _forward(plan, q, k, v, bias, mask)


def _flash_fwd(plan, q, k, v, bias, mask):
    o, lse = _forward(plan, q, k, v, bias, mask)
    return (o, lse), (q, k, v, bias, mask, o, lse)


def _flash_bwd(plan, residuals, cotangents):
    q, k, v, bias, mask, o, lse = residuals
    do, _ = cotangents  # the log-sum-exp is an output, not differentiated
    dq, dk, dv, dbias = _backward(plan, q, k, v, bias, mask, o, lse, do.astype(o.dtype))
    if dbias is not None:
        dbias = dbias.astype(bias.dtype)
    dmask = None if mask is None else jnp.zeros_like(mask)
    return dq, dk, dv, dbias, dmask


_flash.defvjp(_flash_fwd, _flash_bwd)


# --------------------------------------------------------------------------- configs


def kernel_dtype(dtype: Any) -> str:
    """float16 and float32 compute in float32, bfloat16 natively."""
    return "bfloat16" if dtype_name(dtype) == "bfloat16" else "float32"


def _heuristic(target: str, kdtype: str, d_pad: int, bias_dtype, has_mask) -> dict[str, int]:
    """For a head_dim or dtype the table lacks: the largest square power-of-two
    blocks from 512 down whose every kernel fits the scoped VMEM default."""
    gen = generation(target)
    for b in (512, 256, 128):
        config = {"block_q": b, "block_k": b}
        estimates = check_config(config, kdtype, d_pad, target, bias_dtype, has_mask)
        if max(e.total for e in estimates.values()) <= gen.scoped_vmem_default_bytes:
            return config
    return {"block_q": 128, "block_k": 128}


def _fit_pair(fwd: int, bwd: int, length: int, align: int) -> tuple[int, int]:
    """Shrink both blocks to the padded length when it is shorter; when only
    one shrinks, use the smaller for both, so one padding serves all kernels."""
    need = _round_up(length, align)
    a, b = min(fwd, need), min(bwd, need)
    if max(a, b) % min(a, b):
        a = b = min(a, b)
    return a, b


def select_config(
    target: str, dtype: Any, head_dim: int, q_len: int, k_len: int, bias_dtype: Any = None, has_mask: bool = False
) -> dict[str, int]:
    """Blocks for one problem on ``target``: the table's entry for the padded
    head_dim and kernel dtype (else the heuristic), shrunk to short sequences."""
    from ceiling import tables

    kdtype = kernel_dtype(dtype)
    d_pad = _round_up(head_dim, LANES)
    found = tables.lookup("tpu", "attention", None, generation(target).target,
                          {"kernel_dtype": kdtype, "head_dim_pad": d_pad}).config
    base = found or _heuristic(target, kdtype, d_pad, bias_dtype, has_mask)
    bq, bk, bqb, bkb = blocks(base)
    rows = sublane_multiple(kdtype) if bias_dtype is None else max(sublane_multiple(kdtype), sublane_multiple(bias_dtype))
    bq, bqb = _fit_pair(bq, bqb, q_len, rows)
    bk, bkb = _fit_pair(bk, bkb, k_len, LANES)
    config = {"block_q": bq, "block_k": bk, "block_q_bwd": bqb, "block_k_bwd": bkb}
    check_config(config, kdtype, d_pad, target, bias_dtype, has_mask)
    return config


# ceiling.op's hooks: blocks are resolved together (a config= gives them all), then fitted to the
# problem's lengths, so this implementation resolves its own configs.


def _kernel_bias_dtype(problem):
    if problem.bias_shape is None:
        return None
    return "bfloat16" if problem.bias_dtype == "bfloat16" else "float32"


def resolve(problem, impl, user):
    from ceiling.spaces.config import Config

    target = attached_tpu() or DEFAULT_TARGET
    bias_dtype = _kernel_bias_dtype(problem)
    if user is None:
        config, source = select_config(target, problem.dtype, problem.head_dim, problem.q_len, problem.k_len,
                                       bias_dtype, problem.has_mask), "table or heuristic, fitted to the lengths"
    else:
        config, source = copied(user), "config="
        check_config(config, kernel_dtype(problem.dtype), _round_up(problem.head_dim, LANES), target, bias_dtype,
                     problem.has_mask)
    return Config(config, "attention", target, source)


def forward_jax(problem, config, q, k, v, bias, mask):
    return attention_fwd_jax(q, k, v, bias, mask, problem.causal, problem.scale, config.as_dict(), target=config.target)


def backward_jax(problem, config, saved, grads, needs):
    s = saved
    return attention_bwd_jax(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                             problem.causal, problem.scale, needs["bias"], config.as_dict(), target=config.target)


def forward(problem, config, q, k, v, bias, mask):
    return attention_fwd(q, k, v, bias, mask, problem.causal, problem.scale, config.as_dict(), target=config.target)


def backward(problem, config, saved, grads, needs):
    s = saved
    return attention_bwd(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                         problem.causal, problem.scale, needs["bias"], config.as_dict(), target=config.target)


# --------------------------------------------------------------------------- wrapper


def default_interpret() -> Any:
    """False on a TPU; elsewhere the TPU interpret mode (simulated VMEM and
    DMAs, uninitialized memory poisoned with NaN) where this JAX has it."""
    if attached_tpu() is not None:
        return False
    if hasattr(pltpu, "InterpretParams"):
        return pltpu.InterpretParams()
    return True


def _check(q, k, v, causal, scale, bias, mask):
    """The spec's checks on shapes and dtypes, before anything runs."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if getattr(x, "ndim", None) != 4:
            raise InputError(name, "a 4-D (batch, seq, heads, head_dim) array", f"shape {getattr(x, 'shape', None)}")
    batch, q_len, heads, head_dim = q.shape
    _, k_len, kv_heads, k_dim = k.shape
    if k_dim != head_dim or k.shape[0] != batch:
        raise InputError("k", f"(batch {batch}, k_len, kv_heads, head_dim {head_dim}) like q", f"shape {k.shape}")
    if v.shape != k.shape:
        raise InputError("v", f"the shape of k, {k.shape}", f"shape {v.shape}")
    if min(batch, q_len, k_len, heads, kv_heads) < 1:
        raise InputError("q", "non-empty batch, sequence and head dimensions", f"q {q.shape}, k {k.shape}")
    if heads % kv_heads:
        raise InputError("k", f"a number of heads that divides q's {heads}", f"{kv_heads} heads")
    if not 32 <= head_dim <= 256:
        raise InputError("q", "head_dim in [32, 256]", str(head_dim))
    name = dtype_name(q.dtype)
    if name not in ("bfloat16", "float16", "float32"):
        raise InputError("q", "dtype bfloat16 or float16 (float32 for reference runs)", name)
    for arg, x in (("k", k), ("v", v)):
        if dtype_name(x.dtype) != name:
            raise InputError(arg, f"dtype {name} like q", dtype_name(x.dtype))
    full = (batch, heads, q_len, k_len)

    def broadcastable(shape):
        return len(shape) <= 4 and all(s in (1, f) for s, f in zip(reversed(shape), reversed(full)))

    if bias is not None:
        if not broadcastable(bias.shape):
            raise InputError("bias", f"a shape broadcastable to (batch, heads, q_len, k_len) = {full}", f"shape {bias.shape}")
        if dtype_name(bias.dtype) not in ("bfloat16", "float16", "float32", "float64"):
            raise InputError("bias", "a float dtype", dtype_name(bias.dtype))
    if mask is not None:
        if dtype_name(mask.dtype) != "bool":
            raise InputError("mask", "a boolean array (True = attend)", dtype_name(mask.dtype))
        if not broadcastable(mask.shape):
            raise InputError("mask", f"a shape broadcastable to (batch, heads, q_len, k_len) = {full}", f"shape {mask.shape}")
    if not isinstance(causal, bool):
        raise InputError("causal", "a bool", repr(causal))
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise InputError("scale", "a finite Python float or None", repr(scale))
    return float(scale)


def _as4(x):
    return None if x is None else x.reshape((1,) * (4 - x.ndim) + tuple(x.shape))


def _pad_pair(x, bcast, q_pad, k_pad, value):
    """Pad a bias-like 4-D array's kept seq dims to the padded lengths."""
    pads = [(0, 0), (0, 0), (0, 0 if bcast[2] else q_pad - x.shape[2]), (0, 0 if bcast[3] else k_pad - x.shape[3])]
    return jnp.pad(x, pads, constant_values=value) if any(p[1] for p in pads) else x


def _make_plan(q, k, bias4, mask4, causal, scale, config, target, interpret) -> Plan:
    batch, q_len, heads, head_dim = q.shape
    k_len, kv_heads = k.shape[1], k.shape[2]
    kdtype = kernel_dtype(q.dtype)
    bias_dtype = None if bias4 is None else ("bfloat16" if dtype_name(bias4.dtype) == "bfloat16" else "float32")
    d_pad = _round_up(head_dim, LANES)
    target = target or attached_tpu() or DEFAULT_TARGET
    if config is None:
        config = select_config(target, kdtype, head_dim, q_len, k_len, bias_dtype, mask4 is not None)
    config = copied(config)
    estimates = check_config(config, kdtype, d_pad, target, bias_dtype, mask4 is not None)
    bq, bk, bqb, bkb = blocks(config)
    full = (batch, heads, q_len, k_len)

    def bcast(x):
        return None if x is None else tuple(s == 1 and f != 1 for s, f in zip(x.shape, full))

    return Plan(
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        q_len=q_len,
        k_len=k_len,
        q_pad=_round_up(q_len, math.lcm(bq, bqb)),
        k_pad=_round_up(k_len, math.lcm(bk, bkb)),
        head_dim=head_dim,
        d_pad=d_pad,
        causal=causal,
        scale=scale,
        kdtype=kdtype,
        bias_dtype=bias_dtype,
        bias_bcast=bcast(bias4),
        mask_bcast=bcast(mask4),
        block_q=bq,
        block_k=bk,
        block_q_bwd=bqb,
        block_k_bwd=bkb,
        target=target,
        vmem_limits=tuple(vmem_limit_bytes(estimates[n], target) for n in ("fwd", "dq", "dkv")),
        interpret=default_interpret() if interpret is None else interpret,
    )


def _to_heads_major(x, plan: Plan, seq_pad: int):
    """(B, S, H, D) -> (B, H, S_pad, D_pad), zero-padded, in the kernel dtype."""
    x = jnp.swapaxes(x.astype(plan.kdtype), 1, 2)
    pads = [(0, 0), (0, 0), (0, seq_pad - x.shape[2]), (0, plan.d_pad - x.shape[3])]
    return jnp.pad(x, pads) if any(p[1] for p in pads) else x


def _from_heads_major(x, seq_len: int, head_dim: int, dtype):
    return jnp.swapaxes(x[:, :, :seq_len, :head_dim], 1, 2).astype(dtype)


def _prepare(q, k, v, bias, mask, causal, scale, config, target, interpret):
    scale = _check(q, k, v, causal, scale, bias, mask)
    bias4, mask4 = _as4(bias), _as4(mask)
    plan = _make_plan(q, k, bias4, mask4, causal, scale, config, target, interpret)
    qp = _to_heads_major(q, plan, plan.q_pad)
    kp = _to_heads_major(k, plan, plan.k_pad)
    vp = _to_heads_major(v, plan, plan.k_pad)
    biasp = maskp = None
    if bias4 is not None:
        biasp = _pad_pair(bias4.astype(plan.bias_dtype), plan.bias_bcast, plan.q_pad, plan.k_pad, 0.0)
    if mask4 is not None:
        # A 0 / -inf tile the kernels select by (0: attend); padded positions are masked by the
        # kernels' own bounds.
        tile = jnp.where(mask4, 0.0, NEG_INF).astype(jnp.bfloat16)
        maskp = _pad_pair(tile, plan.mask_bcast, plan.q_pad, plan.k_pad, 0.0)
    return plan, qp, kp, vp, biasp, maskp


def _unpad_dbias(dbias, bias, plan: Plan):
    dbias = dbias[:, :, : (1 if plan.bias_bcast[2] else plan.q_len), : (1 if plan.bias_bcast[3] else plan.k_len)]
    return dbias.reshape(bias.shape).astype(bias.dtype)


def attention_jax(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    bias=None,
    mask=None,
    return_lse: bool = False,
    config: dict | None = None,
    target: str | None = None,
    interpret: Any = None,
):
    """Flash attention on JAX arrays, differentiable in q, k, v and bias.

    q (batch, q_len, heads, head_dim); k, v (batch, k_len, kv_heads, head_dim);
    bfloat16 or float16 (float32 for reference runs). ``bias``: additive,
    broadcastable to (batch, heads, q_len, k_len), its gradient summed over the
    broadcast dims. ``mask``: boolean, broadcastable likewise, True = attend.
    ``config``: {"block_q", "block_k"[, "block_q_bwd", "block_k_bwd"]} overriding
    the tuned table (checked by ``attention_rules.check_config``). ``target``: the
    generation whose configs and VMEM budget apply (default: the attached TPU,
    else tpu-v5e). ``interpret``: as ``pallas_call``'s; default native on a TPU,
    interpret mode elsewhere. Returns out like q, or (out, lse) with lse
    (batch, heads, q_len) float32, natural log, -inf for rows that see no key.
    """
    plan, qp, kp, vp, biasp, maskp = _prepare(q, k, v, bias, mask, causal, scale, config, target, interpret)
    o, lse = _flash(plan, qp, kp, vp, biasp, maskp)
    out = _from_heads_major(o, plan.q_len, plan.head_dim, q.dtype)
    if not return_lse:
        return out
    return out, lax.stop_gradient(lse[:, :, : plan.q_len, 0])


def attention_fwd_jax(q, k, v, bias, mask, causal, scale, config=None, *, target=None, interpret=None):
    """(out like q, lse (batch, heads, q_len) float32) without autodiff."""
    plan, qp, kp, vp, biasp, maskp = _prepare(q, k, v, bias, mask, causal, scale, config, target, interpret)
    o, lse = _forward(plan, qp, kp, vp, biasp, maskp)
    return _from_heads_major(o, plan.q_len, plan.head_dim, q.dtype), lse[:, :, : plan.q_len, 0]


def attention_bwd_jax(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, config=None, *, target=None, interpret=None):
    """(dq, dk, dv, dbias or None) from the forward's out and lse (batch,
    heads, q_len), as the backward of ``ceiling.attention`` takes them."""
    plan, qp, kp, vp, biasp, maskp = _prepare(q, k, v, bias, mask, causal, scale, config, target, interpret)
    op = _to_heads_major(o, plan, plan.q_pad)
    dop = _to_heads_major(do, plan, plan.q_pad)
    lsep = jnp.pad(lse.astype(jnp.float32), [(0, 0), (0, 0), (0, plan.q_pad - plan.q_len)], constant_values=NEG_INF)
    lsep = jnp.broadcast_to(lsep[..., None], (*lsep.shape, LANES))
    dq, dk, dv, dbias = _backward(plan, qp, kp, vp, biasp, maskp, op, lsep, dop)
    dq = _from_heads_major(dq, plan.q_len, plan.head_dim, q.dtype)
    dk = _from_heads_major(dk, plan.k_len, plan.head_dim, k.dtype)
    dv = _from_heads_major(dv, plan.k_len, plan.head_dim, v.dtype)
    if dbias is not None and bias_grad:
        dbias = _unpad_dbias(dbias, bias, plan)
    else:
        dbias = None
    return dq, dk, dv, dbias


# --------------------------------------------------------------------------- torch


def _torch_to_jax(t):
    if t is None:
        return None
    import ml_dtypes
    import torch

    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    return jnp.asarray(t.numpy())


def _jax_to_torch(x, device):
    if x is None:
        return None
    import torch

    host = np.asarray(x)
    if host.dtype == jnp.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(host.copy()).to(device)


def attention(q, k, v, *, causal=False, scale=None, bias=None, mask=None, return_lse=False, config=None, target=None, interpret=None):
    """``attention_jax`` on torch tensors (copied to JAX and back to q's device;
    forward only: for autograd use ``attention_fwd`` / ``attention_bwd`` from a
    ``torch.autograd`` rule)."""
    out = attention_jax(
        *(_torch_to_jax(x) for x in (q, k, v)),
        causal=causal,
        scale=scale,
        bias=_torch_to_jax(bias),
        mask=_torch_to_jax(mask),
        return_lse=return_lse,
        config=config,
        target=target,
        interpret=interpret,
    )
    if return_lse:
        return _jax_to_torch(out[0], q.device), _jax_to_torch(out[1], q.device)
    return _jax_to_torch(out, q.device)


def attention_fwd(q, k, v, bias, mask, causal, scale, config=None, *, target=None, interpret=None):
    """(out, lse) on torch tensors: the forward a ``ceiling.attention`` backend provides."""
    out, lse = attention_fwd_jax(
        *(_torch_to_jax(x) for x in (q, k, v, bias, mask)), causal, scale, config, target=target, interpret=interpret
    )
    return _jax_to_torch(out, q.device), _jax_to_torch(lse, q.device)


def attention_bwd(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, config=None, *, target=None, interpret=None):
    """(dq, dk, dv, dbias or None) on torch tensors: the backward a backend provides."""
    grads = attention_bwd_jax(
        *(_torch_to_jax(x) for x in (do, q, k, v, o, lse, bias, mask)),
        causal,
        scale,
        bias_grad,
        config,
        target=target,
        interpret=interpret,
    )
    return tuple(_jax_to_torch(g, q.device) for g in grads)


# --------------------------------------------------------------------------- inspection


def _export(fn, *shapes) -> tuple[bool, str, int, int]:
    """Lower ``fn`` for TPU through Pallas's Mosaic lowering and serialize it;
    needs no TPU. (ok, error, serialized bytes, number of Mosaic kernels.)
    Mosaic's layout passes and VMEM allocation run only in libtpu."""
    try:
        exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*shapes)
    except Exception as exc:  # noqa: BLE001 - the report carries the lowering error
        return False, f"{type(exc).__name__}: {exc}".splitlines()[0][:400], 0, 0
    text = exported.mlir_module()
    calls = text.count("tpu_custom_call")
    if not calls:
        return False, "the exported module has no tpu_custom_call", 0, 0
    return True, "", len(exported.mlir_module_serialized), calls


def export_attention(
    target: str,
    dtype: Any,
    config: dict,
    *,
    batch: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    q_len: int,
    k_len: int,
    head_dim: int,
    causal: bool = True,
    bias_shape: tuple[int, ...] | None = None,
    with_mask: bool = True,
) -> dict:
    """Export the forward and the backward (dq, dk/dv, dbias) for TPU on one
    problem; report blocks, grids, VMEM and whether the lowering passed."""
    kdtype = kernel_dtype(dtype)
    gen = generation(target)
    shapes = [
        jax.ShapeDtypeStruct((batch, q_len, heads, head_dim), dtype),
        jax.ShapeDtypeStruct((batch, k_len, kv_heads, head_dim), dtype),
        jax.ShapeDtypeStruct((batch, k_len, kv_heads, head_dim), dtype),
    ]
    if bias_shape is None:
        bias_shape = (1, heads, q_len, k_len)
    shapes.append(jax.ShapeDtypeStruct(bias_shape, jnp.float32))
    mask_shape = (batch, 1, 1, k_len)
    if with_mask:
        shapes.append(jax.ShapeDtypeStruct(mask_shape, jnp.bool_))

    def fwd(q, k, v, bias, *mask):
        return attention_jax(
            q, k, v, causal=causal, bias=bias, mask=mask[0] if mask else None, config=config, target=target, interpret=False
        )

    def fwd_bwd(q, k, v, bias, *mask):
        def loss(q, k, v, bias):
            out = fwd(q, k, v, bias, *mask)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, bias)

    fwd_ok, fwd_err, fwd_bytes, fwd_calls = _export(fwd, *shapes)
    bwd_ok, bwd_err, bwd_bytes, bwd_calls = _export(fwd_bwd, *shapes)
    estimates = check_config(config, kdtype, _round_up(head_dim, LANES), target, "float32", with_mask)
    bq, bk, bqb, bkb = blocks(config)
    qp, kp = _round_up(q_len, math.lcm(bq, bqb)), _round_up(k_len, math.lcm(bk, bkb))
    grids = {
        "fwd": (batch, heads, qp // bq, kp // bk),
        "dq": (batch, heads, qp // bqb, kp // bkb),
        "dkv": (batch, kv_heads, kp // bkb, heads // kv_heads, qp // bqb),
    }
    return {
        "target": target,
        "dtype": dtype_name(dtype),
        "config": dict(config),
        "head_dim": head_dim,
        # flat summary first (what a table shows), the detail after
        "exported": fwd_ok and bwd_ok,
        "fwd_grid": "x".join(map(str, grids["fwd"])),
        "vmem_fwd_bytes": estimates["fwd"].total,
        "vmem_dq_bytes": estimates["dq"].total,
        "vmem_dkv_bytes": estimates["dkv"].total,
        "fits_scoped_default": all(e.total <= gen.scoped_vmem_default_bytes for e in estimates.values()),
        "kernel_dtype": kdtype,
        "problem": {"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q_len, "k_len": k_len,
                    "head_dim": head_dim, "causal": causal, "bias": bias_shape, "mask": mask_shape if with_mask else None},
        "blocks": {"fwd": (bq, bk), "bwd": (bqb, bkb), "head_dim_padded": _round_up(head_dim, LANES)},
        "grid": grids,
        "vmem_bytes": {name: est.as_dict() for name, est in estimates.items()},
        "vmem_limit_bytes": {name: vmem_limit_bytes(est, target) for name, est in estimates.items()},
        "scoped_vmem_default_bytes": gen.scoped_vmem_default_bytes,
        "usable_vmem_bytes": gen.usable_vmem_bytes,
        "exported_fwd": fwd_ok,
        "exported_bwd": bwd_ok,
        "export_error": fwd_err or bwd_err,
        "mosaic_kernels": {"fwd": fwd_calls, "fwd_bwd": bwd_calls},
        "serialized_bytes": {"fwd": fwd_bytes, "fwd_bwd": bwd_bytes},
    }


def inspect_tpu_attention(target: str, dtype: Any = "bfloat16", config: dict | None = None, head_dim: int = 128) -> list[dict]:
    """For each shipped config of ``target`` ("tpu-v5e", "tpu-v5p", "tpu-v6e")
    and ``dtype`` (or only ``config``, at ``head_dim``): export forward and
    backward (causal, GQA 2:1, a bias broadcast over batch, so the dbias kernel
    is in, and a key-padding mask) for TPU on two blocks per axis and report
    blocks, grids, VMEM against the generation's budgets and whether the Mosaic
    lowering passed."""
    kdtype = kernel_dtype(dtype)
    if config is not None:
        shipped = [(head_dim, config, "given")]
    else:
        shipped = [(int(e["when"].split("head_dim_pad ==")[1]), e["config"], f"{e['source']}: {e.get('why', '')}")
                   for e in shipped_entries(target) if f"'{kdtype}'" in e["when"]]
    rows = []
    for d_pad, config, provenance in shipped:
        bq, bk, bqb, bkb = blocks(config)
        report = export_attention(
            target, dtype, config, q_len=2 * max(bq, bqb), k_len=2 * max(bk, bkb), head_dim=int(d_pad)
        )
        report["provenance"] = provenance
        rows.append(report)
    return rows


def shipped_entries(target: str) -> list[dict]:
    """The table entries of ``target``'s generation (each a kernel dtype and padded head dim)."""
    from ceiling import tables

    return tables.read(tables.path("tpu", generation(target).target, "attention"))["entries"]
