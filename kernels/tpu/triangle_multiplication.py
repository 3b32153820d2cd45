"""The triangle multiplicative update on TPU (v5e, v5p, v6e): fused per-pair Pallas kernels
(``fwd_in``: input LayerNorm, the stacked input projections and gates, mask, a and b channel-first,
the output gate; ``fwd_out``: output LayerNorm, projection and gate; ``bwd_out`` and ``bwd_in``, their
weight gradients accumulated in float32 VMEM blocks) around the contraction and its gradient on the
Pallas GEMM of :mod:`ceiling.tpu.gemm`; only the inputs are kept between the passes, and the row
blocks come from ``kernels/tpu/tables/<generation>/triangle_multiplication.json`` fitted to N*N.
The kernels' layouts, grids and dtypes: ``kernels/tpu/README.md``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ceiling.tpu import gemm as tpu_gemm
from ceiling.tpu.generations import DEFAULT_TARGET, LANES, attached_tpu, generation
from ceiling.tpu.trimul_rules import RULES, TrimulConfigError, blocks, check_config
from ceiling.tpu.gemm_rules import copied
from ceiling.tpu.vmem import dtype_name, vmem_limit_bytes

__all__ = [
    "resolve", "forward_jax", "backward_jax", "forward", "backward", "select_config", "export_trimul",
    "inspect_tpu_trimul", "TrimulConfigError", "RULES",
]

NN_DOT = (((1,), (0,)), ((), ()))  # a @ b
NT_DOT = (((1,), (1,)), ((), ()))  # a @ b^T
TN_DOT = (((0,), (0,)), ((), ()))  # a^T @ b


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """Everything static about one call."""

    batch: int
    n: int
    rows: int  # N * N pair rows per batch element
    rows_pad: int  # a multiple of both row blocks
    c_z: int
    c: int
    kdtype: str  # kernel operand dtype: bfloat16 or float32
    has_mask: bool
    eps: float
    block_rows: int
    block_rows_bwd: int
    splits: int  # parallel partial sums of the weight gradients (megacore)
    target: str
    vmem_limits: tuple[int, int, int, int]  # fwd_in, fwd_out, bwd_out, bwd_in
    interpret: Any

    @property
    def precision(self):
        return lax.Precision.HIGHEST if self.kdtype == "float32" else None


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _dot(a, b, dims, plan: Plan):
    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32, precision=plan.precision)


def _sq():
    return pl.Squeezed() if hasattr(pl, "Squeezed") else None


def _params(semantics, limit):
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=limit)


# --------------------------------------------------------------------------- kernels


def _normalize_rows(x, eps):
    """(x_hat, rstd) of a (rows, c_z) float32 block, LayerNorm over the lane axis."""
    mu = jnp.mean(x, axis=1, keepdims=True)
    xc = x - mu
    rstd = lax.rsqrt(jnp.mean(xc * xc, axis=1, keepdims=True) + eps)
    return xc * rstd, rstd


def _normalize_channels(y, eps):
    """(y_hat, rstd) of a channel-first (c, rows) float32 block, LayerNorm over the sublane axis."""
    mu = jnp.mean(y, axis=0, keepdims=True)
    yc = y - mu
    rstd = lax.rsqrt(jnp.mean(yc * yc, axis=0, keepdims=True) + eps)
    return yc * rstd, rstd


def _split_mask(refs, has_mask):
    refs = list(refs)
    return (refs.pop(0) if has_mask else None), refs


def _fwd_in_kernel(x_ref, *refs, plan: Plan):
    """x block -> a, b (channel-first) and the output gate (row-major)."""
    mask_ref, (lnw_ref, lnb_ref, w_in_ref, b_in_ref, wgo_t_ref, bgo_ref, a_ref, b_ref, gate_ref) = _split_mask(
        refs, plan.has_mask)
    c, kd = plan.c, plan.kdtype
    x_hat, _ = _normalize_rows(x_ref[...].astype(jnp.float32), plan.eps)
    xn = (x_hat * lnw_ref[...] + lnb_ref[...]).astype(kd)
    # [u; v] = [p_in; g_in] @ xn^T: channel-first (4c, rows), the a/b halves on sublanes.
    uv = _dot(w_in_ref[...], xn, NT_DOT, plan) + b_in_ref[...]
    ab = jax.nn.sigmoid(uv[2 * c:]) * uv[: 2 * c]
    if mask_ref is not None:
        ab = ab * mask_ref[...]  # (1, rows): the pair mask along lanes
    a_ref[...] = ab[:c].astype(a_ref.dtype)
    b_ref[...] = ab[c:].astype(b_ref.dtype)
    gate_ref[...] = jax.nn.sigmoid(_dot(xn, wgo_t_ref[...], NN_DOT, plan) + bgo_ref[...]).astype(gate_ref.dtype)


def _fwd_out_kernel(y_ref, gate_ref, lnw_ref, lnb_ref, wpo_t_ref, bpo_ref, out_ref, *, plan: Plan):
    """Channel-first y block -> LayerNorm over channels -> projection -> times the gate."""
    y_hat, _ = _normalize_channels(y_ref[...], plan.eps)
    yn = (y_hat * lnw_ref[...] + lnb_ref[...]).astype(plan.kdtype)
    z = _dot(yn, wpo_t_ref[...], TN_DOT, plan) + bpo_ref[...]  # (rows, c_z): yn^T @ p_out^T
    out_ref[...] = (gate_ref[...].astype(jnp.float32) * z).astype(out_ref.dtype)


def _bwd_out_kernel(y_ref, gate_ref, dout_ref, lnw_ref, lnb_ref, wpo_t_ref, bpo_ref,
                    dy_ref, dgl_ref, dwpo_t_ref, dbpo_ref, dlnw_ref, dlnb_ref, *, plan: Plan):
    """dout -> dy (channel-first), d(gate logits), and the output side's weight gradients."""
    kd = plan.kdtype

    @pl.when(pl.program_id(2) == 0)
    def _init():
        for ref in (dwpo_t_ref, dbpo_ref, dlnw_ref, dlnb_ref):
            ref[...] = jnp.zeros(ref.shape, jnp.float32)

    y_hat, rstd = _normalize_channels(y_ref[...], plan.eps)
    lnw = lnw_ref[...]
    yn = (y_hat * lnw + lnb_ref[...]).astype(kd)
    z = _dot(yn, wpo_t_ref[...], TN_DOT, plan) + bpo_ref[...]
    gate = gate_ref[...].astype(jnp.float32)
    dout = dout_ref[...].astype(jnp.float32)
    dz = dout * gate
    dgl_ref[...] = (dout * z * gate * (1.0 - gate)).astype(dgl_ref.dtype)
    dz_k = dz.astype(kd)
    dwpo_t_ref[...] += _dot(yn, dz_k, NN_DOT, plan)  # (c, c_z) = yn @ dz
    dbpo_ref[...] += jnp.sum(dz, axis=0, keepdims=True)
    dyn = _dot(wpo_t_ref[...], dz_k, NT_DOT, plan)  # (c, rows) = p_out^T @ dz^T
    dlnb_ref[...] += jnp.sum(dyn, axis=1, keepdims=True)
    dlnw_ref[...] += jnp.sum(dyn * y_hat, axis=1, keepdims=True)
    dy_hat = dyn * lnw
    dy = rstd * (dy_hat - jnp.mean(dy_hat, axis=0, keepdims=True)
                 - y_hat * jnp.mean(dy_hat * y_hat, axis=0, keepdims=True))
    dy_ref[...] = dy.astype(dy_ref.dtype)


def _bwd_in_kernel(x_ref, *refs, plan: Plan):
    """da, db, d(gate logits) -> dx and the input side's weight gradients."""
    mask_ref, rest = _split_mask(refs, plan.has_mask)
    (da_ref, db_ref, dgl_ref, lnw_ref, lnb_ref, w_in_ref, b_in_ref, wgo_ref,
     dx_ref, dw_in_ref, db_in_ref, dwgo_ref, dbgo_ref, dlnw_ref, dlnb_ref) = rest
    c, kd = plan.c, plan.kdtype

    @pl.when(pl.program_id(2) == 0)
    def _init():
        for ref in (dw_in_ref, db_in_ref, dwgo_ref, dbgo_ref, dlnw_ref, dlnb_ref):
            ref[...] = jnp.zeros(ref.shape, jnp.float32)

    x_hat, rstd = _normalize_rows(x_ref[...].astype(jnp.float32), plan.eps)
    lnw = lnw_ref[...]
    xn = (x_hat * lnw + lnb_ref[...]).astype(kd)
    w_in = w_in_ref[...]
    uv = _dot(w_in, xn, NT_DOT, plan) + b_in_ref[...]
    u, s = uv[: 2 * c], jax.nn.sigmoid(uv[2 * c:])
    dab = jnp.concatenate([da_ref[...].astype(jnp.float32), db_ref[...].astype(jnp.float32)], axis=0)
    if mask_ref is not None:
        dab = dab * mask_ref[...]
    duv = jnp.concatenate([dab * s, dab * u * s * (1.0 - s)], axis=0)  # (4c, rows): [du; dv]
    duv_k = duv.astype(kd)
    dgl = dgl_ref[...]
    dw_in_ref[...] += _dot(duv_k, xn, NN_DOT, plan)  # (4c, c_z)
    db_in_ref[...] += jnp.sum(duv, axis=1, keepdims=True)
    dwgo_ref[...] += _dot(dgl.astype(kd), xn, TN_DOT, plan)  # (c_z, c_z) = dgl^T @ xn
    dbgo_ref[...] += jnp.sum(dgl.astype(jnp.float32), axis=0, keepdims=True)
    dxn = _dot(duv_k, w_in, TN_DOT, plan) + _dot(dgl.astype(kd), wgo_ref[...], NN_DOT, plan)  # (rows, c_z)
    dlnb_ref[...] += jnp.sum(dxn, axis=0, keepdims=True)
    dlnw_ref[...] += jnp.sum(dxn * x_hat, axis=0, keepdims=True)
    dx_hat = dxn * lnw
    dx = rstd * (dx_hat - jnp.mean(dx_hat, axis=1, keepdims=True)
                 - x_hat * jnp.mean(dx_hat * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)


# --------------------------------------------------------------------------- pallas calls


def _whole(shape, grid_rank):
    """BlockSpec of an array read whole at every step (a weight): same block, fetched once."""
    zeros = (0,) * len(shape)
    return pl.BlockSpec(tuple(shape), (lambda i, j: zeros) if grid_rank == 2 else (lambda b, s, t: zeros))


def _fwd_in(plan: Plan, x, mask, p):
    """x (B, R, c_z), mask (B, 1, R) f32 -> a, b (B, c, R), gate (B, R, c_z)."""
    bm, sq, c, cz, kd = plan.block_rows, _sq(), plan.c, plan.c_z, plan.kdtype
    grid = (plan.batch, plan.rows_pad // bm)
    row_spec = pl.BlockSpec((sq, bm, cz), lambda b, j: (b, j, 0))
    cf_spec = pl.BlockSpec((sq, c, bm), lambda b, j: (b, 0, j))
    in_specs = [row_spec]
    operands = [x]
    if plan.has_mask:
        in_specs.append(pl.BlockSpec((sq, 1, bm), lambda b, j: (b, 0, j)))
        operands.append(mask)
    weights = (p["lnw"], p["lnb"], p["w_in"], p["b_in"], p["wgo_t"], p["bgo"])
    in_specs += [_whole(w.shape, 2) for w in weights]
    pairs = plan.batch * plan.rows_pad
    return pl.pallas_call(
        functools.partial(_fwd_in_kernel, plan=plan),
        out_shape=(jax.ShapeDtypeStruct((plan.batch, c, plan.rows_pad), kd),
                   jax.ShapeDtypeStruct((plan.batch, c, plan.rows_pad), kd),
                   jax.ShapeDtypeStruct((plan.batch, plan.rows_pad, cz), kd)),
        grid=grid,
        in_specs=in_specs,
        out_specs=(cf_spec, cf_spec, row_spec),
        compiler_params=_params(("parallel", "parallel"), plan.vmem_limits[0]),
        cost_estimate=pl.CostEstimate(flops=2 * pairs * cz * (4 * c + cz), transcendentals=pairs * (2 * c + cz),
                                      bytes_accessed=pairs * (2 * cz + 2 * c) * jnp.dtype(kd).itemsize),
        interpret=plan.interpret,
        name=f"ceiling_trimul_fwd_in_{bm}",
    )(*operands, *weights)


def _fwd_out(plan: Plan, y, gate, p, out_dtype):
    """y (B, c, R) f32, gate (B, R, c_z) -> out (B, R, c_z)."""
    bm, sq, c, cz = plan.block_rows, _sq(), plan.c, plan.c_z
    row_spec = pl.BlockSpec((sq, bm, cz), lambda b, j: (b, j, 0))
    weights = (p["lnw_o"], p["lnb_o"], p["wpo_t"], p["bpo"])
    pairs = plan.batch * plan.rows_pad
    return pl.pallas_call(
        functools.partial(_fwd_out_kernel, plan=plan),
        out_shape=jax.ShapeDtypeStruct((plan.batch, plan.rows_pad, cz), out_dtype),
        grid=(plan.batch, plan.rows_pad // bm),
        in_specs=[pl.BlockSpec((sq, c, bm), lambda b, j: (b, 0, j)), row_spec, *(_whole(w.shape, 2) for w in weights)],
        out_specs=row_spec,
        compiler_params=_params(("parallel", "parallel"), plan.vmem_limits[1]),
        cost_estimate=pl.CostEstimate(flops=2 * pairs * c * cz, transcendentals=pairs,
                                      bytes_accessed=pairs * (4 * c + 2 * cz * jnp.dtype(plan.kdtype).itemsize)),
        interpret=plan.interpret,
        name=f"ceiling_trimul_fwd_out_{bm}",
    )(y, gate, *weights)


def _bwd_grid(plan: Plan):
    steps = plan.rows_pad // plan.block_rows_bwd // plan.splits
    return (plan.batch, plan.splits, steps), steps


def _acc_spec(shape):
    """A (batch, split)-indexed float32 accumulator block, resident across the row axis."""
    sq = _sq()
    return pl.BlockSpec((sq, sq, *shape), lambda b, s, t: (b, s) + (0,) * len(shape))


def _acc_shape(plan: Plan, shape):
    return jax.ShapeDtypeStruct((plan.batch, plan.splits, *shape), jnp.float32)


def _bwd_out(plan: Plan, y, gate, dout, p):
    """-> dy (B, c, R), d(gate logits) (B, R, c_z), partial dW_out^T, db_out, dLN_out w, b."""
    bm, sq, c, cz, kd = plan.block_rows_bwd, _sq(), plan.c, plan.c_z, plan.kdtype
    grid, steps = _bwd_grid(plan)
    row_spec = pl.BlockSpec((sq, bm, cz), lambda b, s, t: (b, s * steps + t, 0))
    cf_spec = pl.BlockSpec((sq, c, bm), lambda b, s, t: (b, 0, s * steps + t))
    weights = (p["lnw_o"], p["lnb_o"], p["wpo_t"], p["bpo"])
    shapes = ((c, cz), (1, cz), (c, 1), (c, 1))
    return pl.pallas_call(
        functools.partial(_bwd_out_kernel, plan=plan),
        out_shape=(jax.ShapeDtypeStruct((plan.batch, c, plan.rows_pad), kd),
                   jax.ShapeDtypeStruct((plan.batch, plan.rows_pad, cz), kd),
                   *(_acc_shape(plan, s) for s in shapes)),
        grid=grid,
        in_specs=[cf_spec, row_spec, row_spec, *(_whole(w.shape, 3) for w in weights)],
        out_specs=(cf_spec, row_spec, *(_acc_spec(s) for s in shapes)),
        compiler_params=_params(("parallel", "parallel", "arbitrary"), plan.vmem_limits[2]),
        interpret=plan.interpret,
        name=f"ceiling_trimul_bwd_out_{bm}",
    )(y, gate, dout, *weights)


def _bwd_in(plan: Plan, x, mask, da, db, dgl, p, dx_dtype):
    """-> dx (B, R, c_z) and partial dW_in, db_in, dW_gout, db_gout, dLN_in w, b."""
    bm, sq, c, cz = plan.block_rows_bwd, _sq(), plan.c, plan.c_z
    grid, steps = _bwd_grid(plan)
    row_spec = pl.BlockSpec((sq, bm, cz), lambda b, s, t: (b, s * steps + t, 0))
    cf_spec = pl.BlockSpec((sq, c, bm), lambda b, s, t: (b, 0, s * steps + t))
    in_specs, operands = [row_spec], [x]
    if plan.has_mask:
        in_specs.append(pl.BlockSpec((sq, 1, bm), lambda b, s, t: (b, 0, s * steps + t)))
        operands.append(mask)
    weights = (p["lnw"], p["lnb"], p["w_in"], p["b_in"], p["wgo"])
    shapes = ((4 * c, cz), (4 * c, 1), (cz, cz), (1, cz), (1, cz), (1, cz))
    return pl.pallas_call(
        functools.partial(_bwd_in_kernel, plan=plan),
        out_shape=(jax.ShapeDtypeStruct((plan.batch, plan.rows_pad, cz), dx_dtype),
                   *(_acc_shape(plan, s) for s in shapes)),
        grid=grid,
        in_specs=[*in_specs, cf_spec, cf_spec, row_spec, *(_whole(w.shape, 3) for w in weights)],
        out_specs=(row_spec, *(_acc_spec(s) for s in shapes)),
        compiler_params=_params(("parallel", "parallel", "arbitrary"), plan.vmem_limits[3]),
        interpret=plan.interpret,
        name=f"ceiling_trimul_bwd_in_{bm}",
    )(*operands, da, db, dgl, *weights)


# --------------------------------------------------------------------------- contraction


def _bmm(plan: Plan, a, b):
    """(Z, M, K) @ (Z, K, N) on the MXU through the Pallas GEMM, float32 result."""
    return tpu_gemm.gemm_jax(a, b, out_dtype=jnp.float32, target=plan.target, interpret=plan.interpret)


def _to_square(plan: Plan, t):
    """Channel-first (B, c, R_pad) -> (B*c, N, N), the contraction's operand."""
    return t[:, :, : plan.rows].reshape(plan.batch * plan.c, plan.n, plan.n)


def _from_square(plan: Plan, t):
    t = t.reshape(plan.batch, plan.c, plan.rows)
    pad = plan.rows_pad - plan.rows
    return jnp.pad(t, ((0, 0), (0, 0), (0, pad))) if pad else t


def _contract(plan: Plan, direction, a, b):
    """y (Z, N, N) float32: outgoing a b^T, incoming a^T b."""
    if direction == "outgoing":
        return _bmm(plan, a, jnp.swapaxes(b, 1, 2))
    return _bmm(plan, jnp.swapaxes(a, 1, 2), b)


def _contract_bwd(plan: Plan, direction, a, b, dy):
    dy = dy.astype(a.dtype)
    if direction == "outgoing":  # y = a b^T: da = dy b, db = dy^T a
        return _bmm(plan, dy, b), _bmm(plan, jnp.swapaxes(dy, 1, 2), a)
    return _bmm(plan, b, jnp.swapaxes(dy, 1, 2)), _bmm(plan, a, dy)  # y = a^T b: da = b dy^T, db = a dy


# --------------------------------------------------------------------------- wrapper


def _kernel_params(plan: Plan, weights):
    """The weights in the orientation and dtype each kernel reads them."""
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    kd, f32, c, cz = plan.kdtype, jnp.float32, plan.c, plan.c_z
    return {
        "lnw": lnw.astype(f32).reshape(1, cz), "lnb": lnb.astype(f32).reshape(1, cz),
        "w_in": jnp.concatenate([wp, wg], axis=0).astype(kd),  # (4c, c_z): [p_in; g_in]
        "b_in": jnp.concatenate([bp, bg]).astype(f32).reshape(4 * c, 1),
        "wgo": wgo.astype(kd), "wgo_t": wgo.T.astype(kd), "bgo": bgo.astype(f32).reshape(1, cz),
        "lnw_o": lnw_o.astype(f32).reshape(c, 1), "lnb_o": lnb_o.astype(f32).reshape(c, 1),
        "wpo_t": wpo.T.astype(kd), "bpo": bpo.astype(f32).reshape(1, cz),  # (c, c_z)
    }


def _rows_major(plan: Plan, x):
    """(B, N, N, c_z) -> (B, R_pad, c_z) in the kernel dtype."""
    x = x.astype(plan.kdtype).reshape(plan.batch, plan.rows, plan.c_z)
    pad = plan.rows_pad - plan.rows
    return jnp.pad(x, ((0, 0), (0, pad), (0, 0))) if pad else x


def _mask_rows(plan: Plan, mask):
    if not plan.has_mask:
        return None
    m = mask.astype(jnp.float32).reshape(plan.batch, 1, plan.rows)
    pad = plan.rows_pad - plan.rows
    return jnp.pad(m, ((0, 0), (0, 0), (0, pad))) if pad else m


def _up_to_contraction(plan: Plan, direction, x, mask, weights):
    """Everything before the output kernel: (params, x rows, mask rows, a, b, gate, y)."""
    p = _kernel_params(plan, weights)
    xr, mr = _rows_major(plan, x), _mask_rows(plan, mask)
    a, b, gate = _fwd_in(plan, xr, mr, p)
    a_sq, b_sq = _to_square(plan, a), _to_square(plan, b)
    y = _from_square(plan, _contract(plan, direction, a_sq, b_sq))
    return p, xr, mr, a_sq, b_sq, gate, y


def _forward(plan: Plan, direction, x, mask, weights):
    """out (B, R_pad, c_z) in the kernel dtype."""
    p, _, _, _, _, gate, y = _up_to_contraction(plan, direction, x, mask, weights)
    return _fwd_out(plan, y, gate, p, plan.kdtype)


def _backward(plan: Plan, direction, x, mask, weights, dout):
    """The forward up to y again (only the inputs are kept), then the three backward steps."""
    p, xr, mr, a_sq, b_sq, gate, y = _up_to_contraction(plan, direction, x, mask, weights)
    doutr = _rows_major(plan, dout)
    dy, dgl, dwpo_t, dbpo, dlnw_o, dlnb_o = _bwd_out(plan, y, gate, doutr, p)
    da, db = _contract_bwd(plan, direction, a_sq, b_sq, _to_square(plan, dy))
    dx, dw_in, db_in, dwgo, dbgo, dlnw, dlnb = _bwd_in(
        plan, xr, mr, _from_square(plan, da).astype(plan.kdtype), _from_square(plan, db).astype(plan.kdtype), dgl, p,
        plan.kdtype)

    def total(g):  # sum the (batch, split) partial sums
        return g.sum(axis=(0, 1))

    c, cz = plan.c, plan.c_z
    dw_in, db_in = total(dw_in), total(db_in).reshape(4 * c)
    grads = (
        total(dlnw).reshape(cz), total(dlnb).reshape(cz),
        dw_in[: 2 * c], db_in[: 2 * c], dw_in[2 * c:], db_in[2 * c:],
        total(dlnw_o).reshape(c), total(dlnb_o).reshape(c),
        total(dwpo_t).T, total(dbpo).reshape(cz), total(dwgo), total(dbgo).reshape(cz),
    )
    dx = dx[:, : plan.rows].reshape(x.shape)
    return dx, grads


# --------------------------------------------------------------------------- configs


def kernel_dtype(dtype: Any) -> str:
    """bfloat16 runs natively; float16 and float32 compute in float32."""
    return "bfloat16" if dtype_name(dtype) == "bfloat16" else "float32"


def _fit_rows(block: int, rows: int) -> int:
    """The row block for ``rows`` pair rows: one 128-aligned block covering a short
    problem; else the largest multiple of 128 within [block/2, block] that divides
    ``rows`` (no padding copy), else ``block``."""
    if rows <= block:
        return _round_up(rows, LANES)
    for cand in range(block, block // 2 - 1, -LANES):
        if rows % cand == 0:
            return cand
    return block


def select_config(target: str, dtype: Any, n: int, c_z: int, c: int) -> dict[str, int]:
    """Row blocks for an N x N pair tensor on ``target``: the table's entry for the
    kernel dtype (``tables/<generation>/triangle_multiplication.json``), fitted to N*N so that
    the two blocks nest."""
    from ceiling import tables

    kd = kernel_dtype(dtype)
    entry = tables.lookup("tpu", "triangle_multiplication", None, generation(target).target,
                          {"kernel_dtype": kd}).config
    rows = n * n
    bm = _fit_rows(int(entry["block_rows"]), rows)
    bmb = _fit_rows(int(entry["block_rows_bwd"]), rows)
    if max(bm, bmb) % min(bm, bmb):
        bm = bmb = min(bm, bmb)
    config = {"block_rows": bm, "block_rows_bwd": bmb}
    check_config(config, kd, c_z, c, target)
    return config


def default_interpret() -> Any:
    """False on a TPU; elsewhere the TPU interpret mode (simulated VMEM and DMAs,
    uninitialized memory poisoned with NaN)."""
    if attached_tpu() is not None:
        return False
    return pltpu.InterpretParams() if hasattr(pltpu, "InterpretParams") else True


def make_plan(x_shape, x_dtype, c, has_mask, eps, config=None, target=None, interpret=None) -> Plan:
    batch, n, _, c_z = x_shape
    kd = kernel_dtype(x_dtype)
    target = target or attached_tpu() or DEFAULT_TARGET
    config = select_config(target, kd, n, c_z, c) if config is None else copied(config)
    estimates = check_config(config, kd, c_z, c, target)
    bm, bmb = blocks(config)
    rows = n * n
    rows_pad = _round_up(rows, max(bm, bmb))
    gen = generation(target)
    splits = gen.tensorcores if (rows_pad // bmb) % gen.tensorcores == 0 else 1
    return Plan(
        batch=batch, n=n, rows=rows, rows_pad=rows_pad, c_z=c_z, c=c, kdtype=kd, has_mask=has_mask, eps=float(eps),
        block_rows=bm, block_rows_bwd=bmb, splits=splits, target=target,
        vmem_limits=tuple(vmem_limit_bytes(estimates[k], target) for k in ("fwd_in", "fwd_out", "bwd_out", "bwd_in")),
        interpret=default_interpret() if interpret is None else interpret,
    )


# --------------------------------------------------------------------------- entry points

# Both run under jit: in TPU interpret mode the Pallas calls talk to the host through
# callbacks that run JAX ops themselves, which deadlocks when the caller dispatches op by op.


@functools.partial(jax.jit, static_argnames=("plan", "direction"))
def _fwd_jit(x, mask, weights, plan, direction):
    out = _forward(plan, direction, x, mask, weights)
    return out[:, : plan.rows].reshape(x.shape).astype(x.dtype)


@functools.partial(jax.jit, static_argnames=("plan", "direction"))
def _bwd_jit(x, mask, weights, dout, plan, direction):
    dx, grads = _backward(plan, direction, x, mask, weights, dout)
    return dx.astype(x.dtype), tuple(g.astype(w.dtype) for g, w in zip(grads, weights))


# ceiling.op's hooks: the two row blocks are resolved together (a config= gives them all), then
# fitted to the problem's N*N pair rows, so this implementation resolves its own configs.


def resolve(problem, impl, user):
    from ceiling.spaces.config import Config

    target = attached_tpu() or DEFAULT_TARGET
    if user is None:
        config, source = select_config(target, problem.dtype, problem.n, problem.c_z, problem.c), \
            "table, fitted to N*N"
    else:
        config, source = copied(user), "config="
        check_config(config, kernel_dtype(problem.dtype), problem.c_z, problem.c, target)
    return Config(config, "triangle_multiplication", target, source)


def _plan(problem, config) -> Plan:
    p = problem
    return make_plan((p.batch, p.n, p.n, p.c_z), jnp.dtype(p.dtype), p.c, p.has_mask, p.eps, config.as_dict(),
                     config.target)


def forward_jax(problem, config, x, mask, *weights):
    """(out like x, empty ab, empty y): the backward reruns ``fwd_in`` and the contraction."""
    out = _fwd_jit(x, mask, tuple(weights), plan=_plan(problem, config), direction=problem.direction)
    return out, jnp.zeros((0,), x.dtype), jnp.zeros((0,), x.dtype)


def backward_jax(problem, config, saved, grads, needs):
    """(dx, d weight for each of ``TRIMUL_WEIGHTS``) from the inputs and the output gradient."""
    from ceiling.triangle.spec import TRIMUL_WEIGHTS

    x, weights = saved["x"], tuple(saved[n] for n in TRIMUL_WEIGHTS)
    dx, dw = _bwd_jit(x, saved["mask"], weights, grads["out"].astype(x.dtype), plan=_plan(problem, config),
                      direction=problem.direction)
    return (dx, *dw)


def _to_jax(t):
    return None if t is None else tpu_gemm._torch_to_jax(t)


def forward(problem, config, x, mask, *weights):
    """:func:`forward_jax` on torch tensors (copied to JAX and back to x's device)."""
    out, _, _ = forward_jax(problem, config, _to_jax(x), _to_jax(mask), *(_to_jax(w) for w in weights))
    return tpu_gemm._jax_to_torch(out, x.device), x.new_empty(0), x.new_empty(0)


def backward(problem, config, saved, grads, needs):
    from ceiling.triangle.spec import TRIMUL_WEIGHTS

    grads = backward_jax(problem, config, {n: _to_jax(t) for n, t in saved.items()}, {"out": _to_jax(grads["out"])},
                         needs)
    x = saved["x"]
    back = tpu_gemm._jax_to_torch
    return (back(grads[0], x.device), *(back(g, x.device).to(saved[n].dtype) for g, n in zip(grads[1:], TRIMUL_WEIGHTS)))


# --------------------------------------------------------------------------- inspection


def _export(fn, *shapes) -> tuple[bool, str, int, list[str]]:
    """Lower ``fn`` for TPU through Mosaic and serialize it (no TPU needed):
    (ok, error, serialized bytes, names of the Mosaic kernels in the module)."""
    import re

    try:
        exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*shapes)
    except Exception as exc:  # noqa: BLE001 - the report carries the lowering error
        return False, f"{type(exc).__name__}: {exc}".splitlines()[0][:400], 0, []
    text = exported.mlir_module()
    names = sorted(set(re.findall(r"ceiling_[a-z_]+\d+(?:x\d+)*", text)))
    if "tpu_custom_call" not in text:
        return False, "the exported module has no tpu_custom_call", 0, []
    return True, "", len(exported.mlir_module_serialized), names


def export_trimul(target: str = "tpu-v5e", dtype: str = "bfloat16", n: int = 384, c_z: int = 128, c: int = 128,
                  direction: str = "outgoing", batch: int = 1, config: dict | None = None) -> dict:
    """Export forward and backward (all six Pallas kernels: the four per-pair kernels
    and the contraction GEMMs) for TPU at one shape; report blocks, grids, VMEM and
    whether the Mosaic lowering passed."""
    kd = kernel_dtype(dtype)
    plan = make_plan((batch, n, n, c_z), jnp.dtype(dtype), c, True, 1e-5, config, target, interpret=False)
    dt = jnp.dtype(dtype)
    shapes = [jax.ShapeDtypeStruct((batch, n, n, c_z), dt), jax.ShapeDtypeStruct((batch, n, n), jnp.bool_)]
    wshapes = [(c_z,), (c_z,), (2 * c, c_z), (2 * c,), (2 * c, c_z), (2 * c,), (c,), (c,), (c_z, c), (c_z,),
               (c_z, c_z), (c_z,)]
    weights = tuple(jax.ShapeDtypeStruct(s, dt) for s in wshapes)

    def fwd(x, mask, weights):
        return _forward(plan, direction, x, mask, weights)

    def bwd(x, mask, weights, dout):
        return _backward(plan, direction, x, mask, weights, dout)

    fwd_ok, fwd_err, fwd_bytes, fwd_names = _export(fwd, *shapes, weights)
    bwd_ok, bwd_err, bwd_bytes, bwd_names = _export(bwd, *shapes, weights, shapes[0])
    estimates = check_config({"block_rows": plan.block_rows, "block_rows_bwd": plan.block_rows_bwd}, kd, c_z, c, target)
    gen = generation(target)
    steps = plan.rows_pad // plan.block_rows_bwd // plan.splits
    return {
        "target": target,
        "dtype": dtype_name(dt),
        "config": {"block_rows": plan.block_rows, "block_rows_bwd": plan.block_rows_bwd},
        "exported": fwd_ok and bwd_ok,
        "fwd_grid": f"{batch}x{plan.rows_pad // plan.block_rows}",
        "bwd_grid": f"{batch}x{plan.splits}x{steps}",
        "vmem_fwd_in_bytes": estimates["fwd_in"].total,
        "vmem_bwd_in_bytes": estimates["bwd_in"].total,
        "fits_scoped_default": all(e.total <= gen.scoped_vmem_default_bytes for e in estimates.values()),
        "kernel_dtype": kd,
        "problem": {"batch": batch, "n": n, "c_z": c_z, "c": c, "direction": direction, "rows_padded": plan.rows_pad},
        "vmem_bytes": {name: est.as_dict() for name, est in estimates.items()},
        "vmem_limit_bytes": dict(zip(("fwd_in", "fwd_out", "bwd_out", "bwd_in"), plan.vmem_limits)),
        "scoped_vmem_default_bytes": gen.scoped_vmem_default_bytes,
        "exported_fwd": fwd_ok,
        "exported_bwd": bwd_ok,
        "export_error": fwd_err or bwd_err,
        "mosaic_kernels": {"fwd": fwd_names, "fwd_bwd": bwd_names},
        "serialized_bytes": {"fwd": fwd_bytes, "fwd_bwd": bwd_bytes},
    }


def inspect_tpu_trimul(target: str, dtype: str = "bfloat16", config: dict | None = None) -> list[dict]:
    """``ceiling inspect triangle_multiplicative_update --target tpu-v5e``: the export at
    AlphaFold 3's widths (c_z = c = 128) and crops N = 384 and 768."""
    rows = []
    for n in (384, 768):
        r = export_trimul(target, dtype, n=n, config=config)
        rows.append({"name": f"trimul_tpu_n{n}", **r})
    return rows

