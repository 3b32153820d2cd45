"""The two pair ops' public functions: their argument forms (triangle attention's single-batch
4-D form and float masks, the multiplicative update's leading batch dimensions and weight
defaults), the checks, and the op (:mod:`ceiling.triangle.op`) that runs them (re-exported by
:mod:`ceiling.triangle`)."""

from __future__ import annotations

from typing import Any

from ceiling.arrays import describe, framework_of
from ceiling.triangle.spec import TRIMUL_WEIGHTS, check_attention, check_backend, check_trimul, default_backend


def _backend(op, backend: str | None, device: str) -> str:
    op.check_backend(backend)
    return backend or default_backend(device)


def _key_mask(mask):
    """The key mask as bool, nonzero = valid (cuEquivariance casts its masks the same way)."""
    if mask is None or describe(mask).dtype == "bool":
        return mask
    return mask != 0


def _in_dtype_of(w, x):
    """``w`` in ``x``'s dtype (a no-op when it already is)."""
    if w is None or w.dtype == x.dtype:
        return w
    return w.to(x.dtype) if framework_of(w) == "torch" else w.astype(x.dtype)


def triangle_attention(q, k, v, bias, mask=None, scale=None, backend: str | None = None, config: dict | None = None,
                       return_lse: bool = False):
    """Triangle attention (starting-node orientation) in cuEquivariance's layout.

    Args:
        q, k, v: (B, N, H, N, D), or (N, H, N, D) for one batch element (the result
            then has that form too); float16, bfloat16 or float32 (float64 on the
            reference).
        bias: (B, 1, H, N, N) (or (1, H, N, N)), shared by the N rows; its gradient is
            a sum over rows, computed in float32 without an O(N^3) buffer.
        mask: optional (B, N, 1, 1, N) (or (N, 1, 1, N)), bool or any real dtype,
            nonzero = valid key. A row with no valid key gives zeros (and zero
            gradients), never NaN; a NaN behind a masked key reaches nothing.
        scale: multiplies q.k; default 1/sqrt(D).
        backend: "reference", "nvidia", "amd", ... None picks the device's vendor
            (the reference for CPU arrays); a Triton backend named for CPU tensors
            runs under the Triton interpreter.
        config: per-kernel block sizes overriding the tuned table (a partial config overrides
            the keys it names, kernel by kernel, on the Triton backends); checked against the
            backend's space (``kernels/spaces/triangle_attention.json``) before anything launches.
        return_lse: also return the (B, N, H, N) (or (N, H, N)) log-sum-exp, float32 (float64
            for float64 inputs), -inf for a row with no valid key (as in ``ceiling.attention``).

    Every check (shapes, dtypes, devices, the backend's head-dim range in
    :data:`ceiling.triangle.spec.HEAD_DIM_LIMITS`) runs before anything launches.
    The ending-node orientation is this op on the transposed pair tensor
    (``TriangleAttention(starting=False)`` does it).
    """
    from ceiling.triangle.op import TRIANGLE_ATTENTION

    problem = check_attention(q, k, v, bias, mask, scale)
    chosen = _backend(TRIANGLE_ATTENTION, backend, problem.device)
    check_backend(problem, chosen)
    mask = _key_mask(mask)
    batched = len(describe(q).shape) == 5
    if not batched:  # cuEquivariance's single-batch form: add the batch dimension, and drop it after
        q, k, v, bias = q[None], k[None], v[None], bias[None]
        mask = None if mask is None else mask[None]
    out, lse = TRIANGLE_ATTENTION.run(problem, chosen, config, (q, k, v, bias, mask), {"scale": problem.scale})
    if not batched:
        out, lse = out[0], lse[0]
    return (out, lse) if return_lse else out


def _default_weights(x, weights: dict[str, Any], c: int, cz: int) -> list:
    """Ones/zeros for absent LayerNorm affine parameters and biases, in x's framework."""
    shapes = {"norm_in_weight": (cz, 1.0), "norm_in_bias": (cz, 0.0), "p_in_bias": (2 * c, 0.0),
              "g_in_bias": (2 * c, 0.0), "norm_out_weight": (c, 1.0), "norm_out_bias": (c, 0.0),
              "p_out_bias": (cz, 0.0), "g_out_bias": (cz, 0.0)}
    ref = weights["p_in_weight"]
    out = []
    for name in TRIMUL_WEIGHTS:
        w = weights.get(name)
        if w is None:
            size, fill = shapes[name]
            if hasattr(ref, "new_full"):
                w = ref.new_full((size,), fill)
            else:
                import jax.numpy as jnp

                w = jnp.full((size,), fill, ref.dtype)
        out.append(w)
    return out


# The projection matrices, used in x's dtype (cast when they differ, as autocast would).
_PROJECTIONS = ("p_in_weight", "g_in_weight", "p_out_weight", "g_out_weight")


def triangle_multiplicative_update(
    x, direction: str = "outgoing", mask=None, norm_in_weight=None, norm_in_bias=None, p_in_weight=None,
    p_in_bias=None, g_in_weight=None, g_in_bias=None, norm_out_weight=None, norm_out_bias=None, p_out_weight=None,
    p_out_bias=None, g_out_weight=None, g_out_bias=None, eps: float = 1e-5, precision=None,
    backend: str | None = None, config: dict | None = None,
):
    """The triangle multiplicative update (AlphaFold 3 Algorithms 12 and 13).

    Same arguments as ``cuequivariance_torch.triangle_multiplicative_update``:
    x (*, N, N, c_z) with any number of leading batch dimensions; mask (*, N, N),
    bool or any real dtype, multiplying a and b; p_in/g_in (2c, c_z) with a =
    first c rows, b = last c; p_out (c_z, c); g_out (c_z, c_z); LayerNorm
    parameters and biases optional. The four projection matrices are used in x's
    dtype (cast when they differ). ``direction="outgoing"``: y_ij = sum_k a_ik b_jk;
    ``"incoming"``: y_ij = sum_k a_ki b_kj (see CONVENTIONS.md for AlphaFold 3's
    released weights). ``precision`` is accepted for signature compatibility: the
    contraction always accumulates in float32, and float32 inputs are computed
    without TF32. ``config`` overrides the backend's tuned table (per kernel on the Triton
    backends, where a partial config overrides the keys it names; ``block_rows`` on TPU) and is
    checked against its space (``kernels/spaces/triangle_multiplication.json``) first.
    """
    from ceiling.triangle.op import TRIANGLE_MULTIPLICATIVE_UPDATE as TRIMUL

    weights = {name: value for name, value in locals().items() if name in TRIMUL_WEIGHTS}
    problem = check_trimul(x, direction, mask, weights, eps)
    chosen = _backend(TRIMUL, backend, problem.device)
    check_backend(problem, chosen)
    weights = {name: _in_dtype_of(w, x) if name in _PROJECTIONS else w for name, w in weights.items()}
    shape = tuple(x.shape)
    x = x.reshape(problem.batch, problem.n, problem.n, problem.c_z)  # the op takes one batch dimension
    mask = None if mask is None else mask.reshape(problem.batch, problem.n, problem.n)
    ordered = _default_weights(x, weights, problem.c, problem.c_z)
    out, _, _ = TRIMUL.run(problem, chosen, config, (x, mask, *ordered), {"direction": direction, "eps": problem.eps})
    return out.reshape(shape)
