"""GEMM on Trainium in NKI, ``activation(a @ b + bias)``: the blocked kernel of the public fully
optimized NKI matmul tutorial with fp32 SBUF accumulators, the bias broadcast by a K=1 matmul and
a fused ScalarE epilogue, edge tiles sliced to the problem; its config resolution (the target's
block shrunk to the problem and to SBUF) and launchers. Written for NKI 0.6.0; without the Neuron
toolchain it runs on ``ceiling.trainium.emulator``. ``kernels/trainium/README.md`` ("The GEMM")
says more; block shapes per target are ``tables/<target>/gemm.json``.
"""

from __future__ import annotations

import os

import numpy as np

from ceiling.trainium.nki_compat import EMULATED, nisa, nki, nl

# ScalarE activation per spec name; "gelu" is the exact (erf) form, as in kernels/gemm/spec.py.
ACTIVATION_OPS = {None: "copy", "relu": "relu", "gelu": "gelu", "silu": "silu"}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@nki.jit
def gemm_kernel(
    lhsT,
    rhs,
    bias,
    out_dtype,
    activation,
    has_bias,
    TILES_IN_BLOCK_M,
    TILES_IN_BLOCK_N,
    TILES_IN_BLOCK_K,
    RESIDENT_M_BLOCKS,
):
    """result[M, N] = act(lhsT.T @ rhs + bias); lhsT is [K, M], rhs [K, N], bias [1, N] fp32."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must share the contraction dimension"

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512
    BLOCK_M = TILE_M * TILES_IN_BLOCK_M
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    BLOCK_K = TILE_K * TILES_IN_BLOCK_K
    NUM_BLOCK_M = _cdiv(M, BLOCK_M)
    NUM_BLOCK_N = _cdiv(N, BLOCK_N)
    NUM_BLOCK_K = _cdiv(K, BLOCK_K)
    act = getattr(nl, ACTIVATION_OPS[activation])

    result = nl.ndarray((M, N), dtype=out_dtype, buffer=nl.shared_hbm)

    # M blocks whose accumulators stay resident in SBUF while the N and K loops run.
    for m_group in nl.affine_range(_cdiv(NUM_BLOCK_M, RESIDENT_M_BLOCKS)):
        m_blocks = range(m_group * RESIDENT_M_BLOCKS, min(NUM_BLOCK_M, (m_group + 1) * RESIDENT_M_BLOCKS))

        for n in nl.affine_range(NUM_BLOCK_N):
            n0 = n * BLOCK_N
            n_cols = min(BLOCK_N, N - n0)
            n_tiles = _cdiv(n_cols, TILE_N)

            # Bias broadcast to all partitions: ones[1, 128].T @ bias[1, cols] on TensorE.
            if has_bias:
                bias_row = nl.ndarray((1, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=bias_row[0:1, 0:n_cols], src=bias[0:1, n0 : n0 + n_cols])
                ones = nl.ndarray((1, TILE_M), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(dst=ones, value=1.0)
                bias_tile = nl.ndarray((TILE_M, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(n_tiles):
                    cols = min(TILE_N, n_cols - bn * TILE_N)
                    bias_psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    nisa.nc_matmul(
                        dst=bias_psum[0:TILE_M, 0:cols],
                        stationary=ones[0:1, 0:TILE_M],
                        moving=bias_row[0:1, bn * TILE_N : bn * TILE_N + cols],
                    )
                    nisa.tensor_copy(dst=bias_tile[0:TILE_M, bn * TILE_N : bn * TILE_N + cols], src=bias_psum[0:TILE_M, 0:cols])

            # fp32 accumulators for every output tile of the resident M blocks (uninitialized:
            # the first K block writes them).
            result_tmps = []
            for m in m_blocks:
                block_m = []
                for bm in range(_cdiv(min(BLOCK_M, M - m * BLOCK_M), TILE_M)):
                    block_m.append(
                        [nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf) for bn in range(n_tiles)]
                    )
                result_tmps.append(block_m)

            for k in nl.sequential_range(NUM_BLOCK_K):
                k_tiles = _cdiv(min(BLOCK_K, K - k * BLOCK_K), TILE_K)
                # rhs tiles [TILE_K, BLOCK_N]: loaded once per (n, k), reused by every M block.
                rhs_tiles = []
                for bk in nl.affine_range(k_tiles):
                    k0 = k * BLOCK_K + bk * TILE_K
                    rows = min(TILE_K, K - k0)
                    rhs_tile = nl.ndarray((TILE_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=rhs_tile[0:rows, 0:n_cols], src=rhs[k0 : k0 + rows, n0 : n0 + n_cols])
                    rhs_tiles.append(rhs_tile)

                for mi, m in enumerate(m_blocks):
                    m0 = m * BLOCK_M
                    m_rows = min(BLOCK_M, M - m0)
                    # lhsT tiles [TILE_K, BLOCK_M]: each stationary slice serves n_tiles moving tiles.
                    lhsT_tiles = []
                    for bk in nl.affine_range(k_tiles):
                        k0 = k * BLOCK_K + bk * TILE_K
                        rows = min(TILE_K, K - k0)
                        lhsT_tile = nl.ndarray((TILE_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=lhsT_tile[0:rows, 0:m_rows], src=lhsT[k0 : k0 + rows, m0 : m0 + m_rows])
                        lhsT_tiles.append(lhsT_tile)

                    for bn in nl.affine_range(n_tiles):
                        cols = min(TILE_N, n_cols - bn * TILE_N)
                        for bm in nl.affine_range(_cdiv(m_rows, TILE_M)):
                            ms = min(TILE_M, m_rows - bm * TILE_M)
                            # One PSUM bank; its first matmul overwrites, the rest accumulate.
                            result_tile = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                            for bk in nl.affine_range(k_tiles):
                                rows = min(TILE_K, K - (k * BLOCK_K + bk * TILE_K))
                                nisa.nc_matmul(
                                    dst=result_tile[0:ms, 0:cols],
                                    stationary=lhsT_tiles[bk][0:rows, bm * TILE_M : bm * TILE_M + ms],
                                    moving=rhs_tiles[bk][0:rows, bn * TILE_N : bn * TILE_N + cols],
                                )
                            acc = result_tmps[mi][bm][bn][0:ms, 0:cols]
                            if k == 0 and has_bias:
                                nisa.tensor_tensor(
                                    dst=acc,
                                    data1=result_tile[0:ms, 0:cols],
                                    data2=bias_tile[0:ms, bn * TILE_N : bn * TILE_N + cols],
                                    op=nl.add,
                                )
                            elif k == 0:
                                nisa.tensor_copy(dst=acc, src=result_tile[0:ms, 0:cols])
                            else:
                                nisa.tensor_tensor(dst=acc, data1=acc, data2=result_tile[0:ms, 0:cols], op=nl.add)

            # Epilogue on ScalarE: activation + cast into one [TILE_M, BLOCK_N] row, one DMA per row.
            for mi, m in enumerate(m_blocks):
                m0 = m * BLOCK_M
                m_rows = min(BLOCK_M, M - m0)
                for bm in nl.affine_range(_cdiv(m_rows, TILE_M)):
                    ms = min(TILE_M, m_rows - bm * TILE_M)
                    result_packed = nl.ndarray((TILE_M, BLOCK_N), dtype=out_dtype, buffer=nl.sbuf)
                    for bn in nl.affine_range(n_tiles):
                        cols = min(TILE_N, n_cols - bn * TILE_N)
                        nisa.activation(
                            dst=result_packed[0:ms, bn * TILE_N : bn * TILE_N + cols],
                            op=act,
                            data=result_tmps[mi][bm][bn][0:ms, 0:cols],
                        )
                    r0 = m0 + bm * TILE_M
                    nisa.dma_copy(dst=result[r0 : r0 + ms, n0 : n0 + n_cols], src=result_packed[0:ms, 0:n_cols])

    return result


# ----------------------------------------------------------------------------- configs


def _table(target: str) -> dict:
    from ceiling import tables

    return tables.read(tables.path("trainium", target, "gemm"))


def configs(target: str) -> list[dict]:
    """The shipped configs for ``target`` ("trn1" or "trn2"): the default first, then the named
    alternatives."""
    if target not in ("trn1", "trn2"):
        raise ValueError(f"target: expected one of ['trn1', 'trn2'], got {target!r}")
    return [dict(e["config"]) for e in _table(target)["entries"]]


def representative_shape() -> tuple[int, int, int]:
    s = _table("trn2")["representative_shape"]
    return s["m"], s["n"], s["k"]


def default_target(config: dict | None = None) -> str:
    """The target a call runs on: ``config["target"]``, else the Neuron SDK's
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` when it names trn1/trn2, else trn1 (the stricter chip:
    smaller SBUF, no scalar activation bias), never the newer chip by default."""
    if config and config.get("target"):
        return config["target"]
    env = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "").lower()
    return {"trn1": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2"}.get(env, "trn1")


def _sbuf_bytes(cfg: dict, resident: int, in_itemsize: int, out_itemsize: int, has_bias: bool) -> int:
    """SBUF bytes per partition the kernel keeps live with ``resident`` M blocks."""
    block_n = 512 * cfg["TILES_IN_BLOCK_N"]
    acc = resident * cfg["TILES_IN_BLOCK_M"] * block_n * 4
    lhs = cfg["TILES_IN_BLOCK_K"] * 128 * cfg["TILES_IN_BLOCK_M"] * in_itemsize
    rhs = cfg["TILES_IN_BLOCK_K"] * block_n * in_itemsize
    # Tiles re-created per iteration (bias row/tile/ones per N block, the packed output row)
    # briefly exist twice: the new one is allocated before the old name is rebound.
    bias = 2 * (block_n * 4 * 2 + 128 * 4) if has_bias else 0
    return acc + lhs + rhs + bias + 2 * block_n * out_itemsize


def resolve(problem, impl, user):
    """The target's default config (or the one ``config["name"]`` names) with config= over it,
    checked once against the space of the target config= names (else the default target's); then
    fitted to the problem: blocks shrunk to it and to SBUF, and the M blocks that stay resident."""
    from ceiling import spaces, tables
    from ceiling.spaces.config import Config, resolve as resolve_config

    named = user.get("target") if isinstance(user, dict) else None
    target = named if named in spaces.targets("gemm") and spaces.get("gemm", named).backend == "trainium" else default_target()
    features = {**problem.features(), "name": user.get("name") if isinstance(user, dict) else None}
    found = tables.lookup("trainium", "gemm", None, target, features)
    config = resolve_config("gemm", target, {}, found.config, user, features, found.source)
    return Config(fitted(problem, config, target), "gemm", target, config.source)


def fitted(problem, config, target: str) -> dict:
    """``config`` for ``problem`` on ``target``: blocks shrunk to the problem, then halved (K
    first, then N, then M) until one M block's working set fits in SBUF, and the number of M
    blocks that stay resident (at most ``resident_m_blocks``)."""
    from ceiling.trainium.emulator import targets

    m, n, k = problem.m, problem.n, problem.k
    cfg = {
        "name": config.get("name", "custom"),
        "TILES_IN_BLOCK_M": max(1, min(int(config["TILES_IN_BLOCK_M"]), _cdiv(m, 128))),
        "TILES_IN_BLOCK_N": max(1, min(int(config["TILES_IN_BLOCK_N"]), _cdiv(n, 512))),
        "TILES_IN_BLOCK_K": max(1, min(int(config["TILES_IN_BLOCK_K"]), _cdiv(k, 128))),
    }
    in_size = np.dtype(_np_dtype(problem.dtype)).itemsize
    out_size = np.dtype(_np_dtype(problem.out_dtype)).itemsize
    has_bias = problem.bias_dtype is not None
    budget = targets.get(target).sbuf_bytes_per_partition
    while _sbuf_bytes(cfg, 1, in_size, out_size, has_bias) > budget:
        key = next((k_ for k_ in ("TILES_IN_BLOCK_K", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_M") if cfg[k_] > 1), None)
        if key is None:
            break
        cfg[key] = max(1, cfg[key] // 2)
    blocks_m = _cdiv(m, 128 * cfg["TILES_IN_BLOCK_M"])
    fits = 1
    while fits < blocks_m and _sbuf_bytes(cfg, fits + 1, in_size, out_size, has_bias) <= budget:
        fits += 1
    wanted = config.get("resident_m_blocks")
    cfg["resident_m_blocks"] = min(fits, int(wanted)) if wanted else fits
    return cfg


# ----------------------------------------------------------------------------- host side


def _np_dtype(name: str):
    import ml_dtypes

    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def _run_2d(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, activation, out_dtype: str, target: str, cfg,
            dry=False):
    """One 2-D GEMM through the kernel with the resolved ``cfg``; returns (result, emulator
    context or None)."""
    from ceiling.trainium.emulator import ShapeDtype, emulate

    m, k = a.shape
    n = b.shape[1]
    lhsT = ShapeDtype((k, m), a.dtype) if dry else np.ascontiguousarray(a.T)
    rhs = ShapeDtype(b.shape, b.dtype) if dry else np.ascontiguousarray(b)
    if bias is not None:
        bias_row = ShapeDtype((1, n), np.float32) if dry else np.asarray(bias, dtype=np.float32).reshape(1, n)
    else:
        bias_row = ShapeDtype((1, 1), np.float32) if dry else np.zeros((1, 1), np.float32)  # unused placeholder
    consts = dict(
        out_dtype=getattr(nl, out_dtype),
        activation=activation,
        has_bias=bias is not None,
        TILES_IN_BLOCK_M=cfg["TILES_IN_BLOCK_M"],
        TILES_IN_BLOCK_N=cfg["TILES_IN_BLOCK_N"],
        TILES_IN_BLOCK_K=cfg["TILES_IN_BLOCK_K"],
        RESIDENT_M_BLOCKS=cfg["resident_m_blocks"],
    )
    if not EMULATED:  # the real Neuron toolchain: the target comes from the Neuron environment
        return gemm_kernel(lhsT, rhs, bias_row, **consts), None
    with emulate(target=target, dry=dry) as ctx:
        out = gemm_kernel(lhsT, rhs, bias_row, **consts)
    return out, ctx


def _run(problem, config, a, b, bias):
    """numpy in, numpy out; 3-D inputs loop over the batch."""
    if problem.k == 0 or 0 in problem.out_shape:
        return _empty_sum(problem, bias)

    def one(x, y):
        return _run_2d(x, y, bias, problem.activation, problem.out_dtype, config.target, config)[0]

    if a.ndim == 2:
        return one(a, b)
    return np.stack([one(a[i], b if b.ndim == 2 else b[i]) for i in range(a.shape[0])])


def _empty_sum(problem, bias) -> np.ndarray:
    """The output of an empty contraction (K = 0): the epilogue of a zero accumulator."""
    import torch

    from ceiling.gemm.reference import activate_torch

    z = torch.zeros(problem.out_shape, dtype=torch.float32)
    if bias is not None:
        z = z + torch.from_numpy(np.asarray(bias, np.float32))
    return _torch_to_numpy(activate_torch(z, problem.activation).to(getattr(torch, problem.out_dtype)))


def _torch_to_numpy(x):
    import ml_dtypes
    import torch

    x = x.detach().to("cpu").contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def _numpy_to_torch(x: np.ndarray, device):
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def forward(problem, config, a, b, bias):
    """``activation(a @ b + bias)`` on torch tensors through the NKI kernel (emulated here)."""
    bias_np = None if bias is None else _torch_to_numpy(bias).astype(np.float32)
    out = _run(problem, config, _torch_to_numpy(a), _torch_to_numpy(b), bias_np)
    return (_numpy_to_torch(out, a.device),)


def forward_jax(problem, config, a, b, bias):
    """The same on JAX arrays: a ``jax.pure_callback`` on numpy, so it also runs under ``jax.jit``."""
    import jax
    import jax.numpy as jnp

    out_dtype = jnp.dtype(problem.out_dtype)

    def host(a_, b_, *rest):
        bias_ = np.asarray(rest[0], dtype=np.float32) if rest else None
        return np.asarray(_run(problem, config, np.asarray(a_), np.asarray(b_), bias_)).astype(out_dtype)

    args = (a, b) if bias is None else (a, b, bias)
    return (jax.pure_callback(host, jax.ShapeDtypeStruct(problem.out_shape, out_dtype), *args),)


def gemm(a, b, bias, activation, out_dtype, config=None):
    """``activation(a @ b + bias)`` on torch tensors for a kernel built on this one (the triangle
    multiplication's contraction): the problem checked, its config resolved as the op resolves it."""
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import check

    problem = check(a, b, bias, activation, out_dtype)
    return forward(problem, resolve(problem, GEMM.implementation("trainium"), config), a, b, bias)[0]


def estimate(m: int, n: int, k: int, dtype: str = "bfloat16", target: str = "trn2", config: dict | None = None,
             out_dtype: str | None = None, bias: bool = False, activation=None):
    """Cost-model estimate of one (m, n, k) GEMM from a dry run of the real instruction stream,
    with the config the op resolves for it on ``target`` (``config`` over the table's).

    The dry run executes the kernel's control flow, every hardware-rule check and the
    uninitialized-read checks, but no arithmetic. Returns (CostReport, resolved config, context).
    """
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.trainium.emulator import cost

    problem = shipped_problem(m, n, k, dtype, out_dtype=out_dtype, bias=bias)
    cfg = resolve(problem, GEMM.implementation("trainium"), {**(config or {}), "target": target})
    _, ctx = _run_2d(
        _Shape((m, k), _np_dtype(dtype)),
        _Shape((k, n), _np_dtype(dtype)),
        _Shape((n,), np.float32) if bias else None,
        activation,
        out_dtype or dtype,
        target,
        cfg,
        dry=True,
    )
    report = cost.estimate(ctx.trace, ctx.target, flops=2.0 * m * n * k)
    report.notes.append(f"SBUF peak {ctx.sbuf_peak} B/partition of {ctx.target.sbuf_bytes_per_partition}; PSUM peak {ctx.psum_peak} of {ctx.target.psum_banks} banks")
    return report, cfg.as_dict(), ctx


class _Shape:
    """A stand-in for an input array in dry runs: shape and dtype only."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)

    @property
    def T(self):
        return _Shape(self.shape[::-1], self.dtype)
