"""The NKI emulator: each instruction against numpy, each hardware rule broken on purpose,
uninitialized reads, the PSUM accumulation rule, capacity accounting and the cost model."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from ceiling.trainium.emulator import HardwareRuleError, NoTargetError, UninitializedReadError, cost, emulate, jit
from ceiling.trainium.emulator import isa as nisa
from ceiling.trainium.emulator import language as nl

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def rng():
    return np.random.default_rng()


def sbuf_from(x: np.ndarray, name="x"):
    """An SBUF tile holding ``x``, loaded by DMA from an HBM tensor."""
    src = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm, name=name + "_hbm")
    src.alloc.data[...] = x
    src.alloc.written[...] = True
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, name=name)
    nisa.dma_copy(dst=t, src=src)
    return t


def values(t) -> np.ndarray:
    t.check_written("test")
    return np.asarray(t._data)


# ----------------------------------------------------------------------------- instructions


def test_dma_roundtrip_casts_through_fp32(rng):
    x = rng.standard_normal((128, 96)).astype(np.float32)
    with emulate("trn2"):
        t = sbuf_from(x)
        out = nl.ndarray((128, 96), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        np.testing.assert_array_equal(values(out), x.astype(BF16))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_nc_matmul_is_stationary_transposed_times_moving(rng, dtype):
    s = rng.standard_normal((100, 77)).astype(dtype)
    m = rng.standard_normal((100, 300)).astype(dtype)
    with emulate("trn2"):
        st, mv = sbuf_from(s, "s"), sbuf_from(m, "m")
        p = nl.ndarray((77, 300), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=st, moving=mv)
        ref = s.astype(np.float64).T @ m.astype(np.float64)
        np.testing.assert_allclose(values(p), ref, rtol=1e-5, atol=1e-4)


def test_accumulation_rule(rng):
    s1, m1 = rng.standard_normal((64, 32)).astype(BF16), rng.standard_normal((64, 128)).astype(BF16)
    s2, m2 = rng.standard_normal((64, 32)).astype(BF16), rng.standard_normal((64, 128)).astype(BF16)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    with emulate("trn2"):
        a1, b1, a2, b2 = sbuf_from(s1), sbuf_from(m1), sbuf_from(s2), sbuf_from(m2)
        # Default (accumulate=None): the first write to a fresh PSUM tile overwrites, later ones add.
        p = nl.ndarray((32, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a1, moving=b1)
        np.testing.assert_allclose(values(p), f(s1).T @ f(m1), rtol=1e-5, atol=1e-4)
        nisa.nc_matmul(dst=p, stationary=a2, moving=b2)
        np.testing.assert_allclose(values(p), f(s1).T @ f(m1) + f(s2).T @ f(m2), rtol=1e-5, atol=1e-4)
        # accumulate=False starts a new group; accumulate=True adds.
        nisa.nc_matmul(dst=p, stationary=a2, moving=b2, accumulate=False)
        np.testing.assert_allclose(values(p), f(s2).T @ f(m2), rtol=1e-5, atol=1e-4)
        nisa.nc_matmul(dst=p, stationary=a1, moving=b1, accumulate=True)
        np.testing.assert_allclose(values(p), f(s1).T @ f(m1) + f(s2).T @ f(m2), rtol=1e-5, atol=1e-4)
        # Per element: a write to half the tile, then the whole tile: the new half overwrites.
        q = nl.ndarray((32, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=q[0:32, 0:64], stationary=a1, moving=b1[0:64, 0:64])
        nisa.nc_matmul(dst=q, stationary=a2, moving=b2)
        expect = f(s2).T @ f(m2)
        expect[:, :64] += f(s1).T @ f(m1)[:, :64]
        np.testing.assert_allclose(values(q), expect, rtol=1e-5, atol=1e-4)
        # accumulate=True onto a fresh tile reads uninitialized PSUM.
        r = nl.ndarray((32, 128), nl.float32, buffer=nl.psum, name="fresh")
        with pytest.raises(UninitializedReadError, match="fresh"):
            nisa.nc_matmul(dst=r, stationary=a1, moving=b1, accumulate=True)


@pytest.mark.parametrize("engine", ["tensor", "vector"])
def test_nc_transpose(rng, engine):
    shape = (96, 128) if engine == "tensor" else (32, 20)
    x = rng.standard_normal(shape).astype(BF16)
    with emulate("trn2"):
        t = sbuf_from(x)
        dst = nl.ndarray(shape[::-1], nl.bfloat16, buffer=nl.psum if engine == "tensor" else nl.sbuf)
        nisa.nc_transpose(dst=dst, data=t, engine=getattr(nisa.engine, engine))
        np.testing.assert_array_equal(values(dst), x.T)


@pytest.mark.parametrize("op,ref", [(nl.add, np.add), (nl.multiply, np.multiply), (nl.maximum, np.maximum), (nl.subtract, np.subtract)])
def test_tensor_tensor(rng, op, ref):
    a = rng.standard_normal((128, 200)).astype(np.float32)
    b = rng.standard_normal((128, 200)).astype(BF16)
    with emulate("trn1"):
        ta, tb = sbuf_from(a), sbuf_from(b)
        dst = nl.ndarray((128, 200), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dst, data1=ta, data2=tb, op=op)
        # fp32 math, one rounding to bf16 on output
        np.testing.assert_array_equal(values(dst), ref(a, b.astype(np.float32)).astype(BF16))


def test_tensor_scalar_scalar_and_column_operands(rng):
    x = rng.standard_normal((64, 50)).astype(np.float32)
    col = rng.standard_normal((64, 1)).astype(np.float32)
    with emulate("trn2"):
        tx, tc = sbuf_from(x), sbuf_from(col)
        dst = nl.ndarray((64, 50), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=dst, data=tx, op0=nl.subtract, operand0=tc, op1=nl.multiply, operand1=2.5)
        np.testing.assert_allclose(values(dst), (x - col) * np.float32(2.5), rtol=1e-6)
        nisa.tensor_scalar(dst=dst, data=tx, op0=np.subtract, operand0=1.0, reverse0=True)
        np.testing.assert_allclose(values(dst), 1.0 - x, rtol=1e-6)


def test_activation_scale_bias_and_reduce(rng):
    x = rng.standard_normal((128, 300)).astype(np.float32)
    bias = rng.standard_normal((128, 1)).astype(np.float32)
    with emulate("trn1"):
        tx, tb = sbuf_from(x), sbuf_from(bias)
        dst = nl.ndarray((128, 300), nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=dst, op=nl.exp, data=tx, bias=tb, scale=-0.5, reduce_op=nl.add, reduce_res=acc)
        expect = np.exp(x * -0.5 + bias)
        np.testing.assert_allclose(values(dst), expect, rtol=1e-6)
        np.testing.assert_allclose(values(acc)[:, 0], expect.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "tanh", "sigmoid"])
def test_activation_functions(rng, name):
    from scipy.special import erf

    x = rng.standard_normal((32, 64)).astype(np.float32) * 3
    ref = {
        "relu": np.maximum(x, 0),
        "gelu": 0.5 * x * (1 + erf(x / np.sqrt(2))),
        "silu": x / (1 + np.exp(-x)),
        "tanh": np.tanh(x),
        "sigmoid": 1 / (1 + np.exp(-x)),
    }[name]
    with emulate("trn2"):
        tx = sbuf_from(x)
        dst = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=dst, op=getattr(nl, name), data=tx)
        np.testing.assert_allclose(values(dst), ref, rtol=1e-5, atol=1e-6)


def test_tensor_reduce(rng):
    x = rng.standard_normal((128, 4, 50)).astype(np.float32)
    with emulate("trn2"):
        tx = sbuf_from(x)
        mx = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=mx, op=nl.maximum, data=tx, axis=2)
        np.testing.assert_array_equal(values(mx), x.max(axis=2))
        sm = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=sm, op=np.add, data=tx, axis=(1, 2), negate=True, keepdims=True)
        np.testing.assert_allclose(values(sm)[:, 0], -x.sum(axis=(1, 2)), rtol=1e-5)


def test_memset_iota_affine_select(rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    with emulate("trn2"):
        m = nl.ndarray((64, 10), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=m, value=-3.0)
        assert (values(m).astype(np.float32) == -3.0).all()
        io = nl.ndarray((16, 4, 8), nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=io, pattern=[[100, 4], [1, 8]], offset=7, channel_multiplier=1000)
        p, i, j = np.meshgrid(np.arange(16), np.arange(4), np.arange(8), indexing="ij")
        np.testing.assert_array_equal(values(io), 7 + 1000 * p + 100 * i + j)
        # causal mask: keep key j <= query p, i.e. p - j >= 0
        tx = sbuf_from(x)
        masked = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.affine_select(dst=masked, pattern=[[-1, 128]], channel_multiplier=1, on_true_tile=tx, on_false_value=-9984.0, cmp_op=nl.greater_equal)
        expect = np.where(np.tril(np.ones((128, 128), bool)), x, np.float32(-9984.0))
        np.testing.assert_array_equal(values(masked), expect)


def test_tensor_copy_predicated_selects_and_leaves_no_nan(rng):
    """A select by a uint8 predicate: where it is 0 (with reverse_pred) the scalar replaces the
    value, a NaN included, which an added penalty would keep; its operands' rules are checked."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    x[3, 5] = np.nan
    keep = rng.random((128, 64)) > 0.5
    keep[3, 5] = False
    with emulate("trn2"):
        tx = sbuf_from(x)
        pred = sbuf_from(keep.astype(np.uint8), "pred")
        nisa.tensor_copy_predicated(dst=tx, src=-1e30, predicate=pred, reverse_pred=True)
        np.testing.assert_array_equal(values(tx), np.where(keep, x, np.float32(-1e30)))
        other = sbuf_from(np.zeros((128, 64), np.float32), "other")
        nisa.tensor_copy_predicated(dst=other, src=tx, predicate=pred)
        np.testing.assert_array_equal(values(other), np.where(keep, x, 0))
        with pytest.raises(HardwareRuleError, match="predicate must be uint"):
            nisa.tensor_copy_predicated(dst=tx, src=0.0, predicate=sbuf_from(keep.astype(np.float32), "fpred"))
        with pytest.raises(HardwareRuleError, match="reverse_pred takes a scalar"):
            nisa.tensor_copy_predicated(dst=other, src=tx, predicate=pred, reverse_pred=True)


def test_nl_load_store_and_jit(rng):
    @jit
    def double(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=2.0)
        nl.store(out, y)
        return out

    x = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(double(x, target="trn1"), 2 * x)
    with pytest.raises(NoTargetError):
        double(x)


# ----------------------------------------------------------------------------- uninitialized memory


def test_uninitialized_read_names_tensor_and_instruction():
    with emulate("trn2"):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, name="scratch")
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        with pytest.raises(UninitializedReadError, match=r"nisa.tensor_copy.*'scratch'"):
            nisa.tensor_copy(dst=dst, src=t)
        nisa.memset(dst=t[0:128, 0:63], value=1.0)  # one column short
        with pytest.raises(UninitializedReadError, match="128 of 8192"):
            nisa.activation(dst=dst, op=nl.copy, data=t)
        nisa.memset(dst=t[0:128, 63:64], value=1.0)
        nisa.activation(dst=dst, op=nl.copy, data=t)
        assert np.isnan(nl.ndarray((2, 2), nl.float32)._data).all()  # poisoned


def test_kernel_output_must_be_fully_written(rng):
    @jit(target="trn2")
    def partial(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
        nl.store(out[0:64, :], nl.load(x[0:64, :]))
        return out

    with pytest.raises(UninitializedReadError, match="'out'"):
        partial(rng.standard_normal((128, 8)).astype(np.float32))


# ----------------------------------------------------------------------------- hardware rules


def _rule(rule: str, target: str = "trn2"):
    class _Ctx:
        def __enter__(self):
            self.emu = emulate(target)
            self.emu.__enter__()
            self.raises = pytest.raises(HardwareRuleError)
            self.info = self.raises.__enter__()
            return self

        def __exit__(self, *exc):
            handled = self.raises.__exit__(*exc)
            self.emu.__exit__(None, None, None)
            assert self.info.value.rule == rule, str(self.info.value)
            assert f"[{rule}]" in str(self.info.value) and target in str(self.info.value)
            return handled

    return _Ctx()


def _bf(shape, buffer=nl.sbuf, dtype=nl.bfloat16):
    t = nl.ndarray(shape, dtype, buffer=buffer)
    t.alloc.written[...] = True
    if t.alloc.data is not None:
        t.alloc.data[...] = np.random.default_rng().standard_normal(shape).astype(t.dtype)
    return t


def test_rule_partition_dim():
    with _rule("partition-dim"):
        nl.ndarray((129, 4), nl.float32, buffer=nl.sbuf)


def test_rule_partition_start():
    with _rule("partition-start"):
        x = _bf((128, 8))
        nisa.tensor_copy(dst=_bf((64, 8)), src=x[32:96, :])


def test_rule_sbuf_capacity_per_target():
    with emulate("trn2"):
        keep = nl.ndarray((128, 200 * 1024), nl.uint8)  # 200 KiB fits 224 KiB
        del keep
    with _rule("sbuf-capacity", "trn1"):
        nl.ndarray((128, 200 * 1024), nl.uint8)


def test_sbuf_is_released_when_a_tile_dies():
    with emulate("trn1") as ctx:
        for _ in range(10):
            t = nl.ndarray((128, 60 * 1024), nl.uint8)
            del t  # the tile dies at the end of the iteration
        assert ctx.sbuf_live == 0 and ctx.sbuf_peak == 60 * 1024
        for _ in range(10):
            t = nl.ndarray((128, 60 * 1024), nl.uint8)  # rebinding frees the old tile after the new one exists
        assert t.shape == (128, 60 * 1024) and ctx.sbuf_peak == 2 * 60 * 1024


def test_rule_psum_capacity():
    with _rule("psum-capacity"):
        live = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(8)]
        live.append(nl.ndarray((128, 1), nl.float32, buffer=nl.psum))


def test_rule_psum_bank():
    with _rule("psum-bank"):
        p = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)  # two banks
        nisa.nc_matmul(dst=p[:, 256:768], stationary=_bf((128, 128)), moving=_bf((128, 512)))


@pytest.mark.parametrize(
    "rule,stationary,moving,dst",
    [
        ("matmul-contraction", (128, 128), (64, 512), (128, 512)),
        ("matmul-stationary-free", (128, 129), (128, 256), (128, 256)),
        ("matmul-moving-free", (128, 128), (128, 513), (128, 513)),
    ],
)
def test_rule_matmul_tile_limits(rule, stationary, moving, dst):
    with _rule(rule):
        d = nl.ndarray(dst, nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=d, stationary=_bf(stationary), moving=_bf(moving))


def test_rule_matmul_dtypes():
    with _rule("matmul-dtype-mix"):
        nisa.nc_matmul(dst=nl.ndarray((128, 64), nl.float32, buffer=nl.psum), stationary=_bf((128, 128), dtype=nl.float32), moving=_bf((128, 64)))
    with _rule("matmul-dst-dtype"):
        nisa.nc_matmul(dst=nl.ndarray((128, 64), nl.bfloat16, buffer=nl.psum), stationary=_bf((128, 128)), moving=_bf((128, 64)))
    with _rule("matmul-dtype"):
        nisa.nc_matmul(dst=nl.ndarray((128, 64), nl.float32, buffer=nl.psum), stationary=_bf((128, 128), dtype=nl.int32), moving=_bf((128, 64), dtype=nl.int32))


def test_rule_matmul_memories():
    with _rule("memory"):
        nisa.nc_matmul(dst=nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf), stationary=_bf((128, 128)), moving=_bf((128, 64)))
    with _rule("memory"):
        nisa.nc_matmul(dst=nl.ndarray((128, 64), nl.float32, buffer=nl.psum), stationary=_bf((128, 128), buffer=nl.hbm), moving=_bf((128, 64)))


def test_rule_engine_memories():
    with _rule("tensor-tensor-psum"):
        a, b = _bf((128, 64), nl.psum, nl.float32), _bf((128, 64), nl.psum, nl.float32)
        nisa.tensor_tensor(dst=_bf((128, 64)), data1=a, data2=b, op=nl.add)
    with _rule("gpsimd-psum"):
        nisa.tensor_copy(dst=_bf((128, 64)), src=_bf((128, 64), nl.psum, nl.float32), engine=nisa.engine.gpsimd)
    with _rule("dma-psum"):
        nisa.dma_copy(dst=_bf((128, 64), nl.shared_hbm), src=_bf((128, 64), nl.psum, nl.float32))
    with _rule("memory"):
        nisa.activation(dst=_bf((128, 64)), op=nl.exp, data=_bf((128, 64), nl.hbm))


def test_rule_activation_bias_scalar_only_from_trn2():
    with emulate("trn2"):
        nisa.activation(dst=_bf((128, 64)), op=nl.exp, data=_bf((128, 64)), bias=1.0)
    with _rule("activation-bias", "trn1"):
        nisa.activation(dst=_bf((128, 64)), op=nl.exp, data=_bf((128, 64)), bias=1.0)
    with _rule("activation-bias", "trn1"):
        nisa.activation(dst=_bf((128, 64)), op=nl.exp, data=_bf((128, 64)), bias=_bf((128, 2)))


def test_rule_reduce_axis():
    with _rule("reduce-axis"):
        nisa.tensor_reduce(dst=_bf((1, 64)), op=nl.add, data=_bf((128, 64)), axis=0)
    with _rule("reduce-axis"):
        nisa.tensor_reduce(dst=_bf((128, 4)), op=nl.add, data=_bf((128, 8, 4)), axis=1)


def test_rule_engine_free_size():
    with _rule("engine-free-size"):
        nisa.memset(dst=nl.ndarray((128, 64 * 1024 + 1), nl.bfloat16), value=0.0)


def test_rule_output_buffer():
    @jit(target="trn2")
    def wrong(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)
        nl.store(out, nl.load(x))
        return out

    with pytest.raises(HardwareRuleError) as info:
        wrong(np.ones((4, 4), np.float32))
    assert info.value.rule == "output-buffer"


def test_rules_hold_in_dry_mode():
    with emulate("trn2", dry=True):
        t = nl.ndarray((128, 64), nl.float32, name="never")
        with pytest.raises(UninitializedReadError):
            nisa.tensor_copy(dst=nl.ndarray((128, 64), nl.float32), src=t)
        with pytest.raises(HardwareRuleError):
            nisa.nc_matmul(dst=nl.ndarray((128, 600), nl.float32, buffer=nl.psum), stationary=_bf((128, 128)), moving=_bf((128, 600)))


# ----------------------------------------------------------------------------- cost model


def test_cost_matmul_initiation_interval():
    with emulate("trn2") as ctx:
        p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=_bf((128, 128)), moving=_bf((128, 512)))
        q = nl.ndarray((128, 32), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=q, stationary=_bf((128, 128), dtype=nl.float32), moving=_bf((128, 32), dtype=nl.float32))
    report = cost.estimate(ctx.trace, ctx.target)
    # 512 cycles for N=512 bf16; max(32, 64) * 4 for fp32 N=32; at 2.4 GHz
    assert report.instructions["tensor"] == 2
    assert math.isclose(report.busy_s["tensor"], (512 + 64 * 4) / 2.4e9)
    # one 128x128x512 bf16 matmul is exactly TensorE peak
    assert math.isclose(2 * 128 * 128 * 512 / (512 / 2.4e9), ctx.target.tensor_peak_flops)


def test_cost_engines_overlap_unless_dependent():
    def run(dependent: bool):
        with emulate("trn2") as ctx:
            x = _bf((128, 4096), dtype=nl.float32)
            for _ in range(8):
                y = nl.ndarray((128, 4096), nl.float32)
                nisa.tensor_scalar(dst=y, data=x, op0=nl.add, operand0=1.0)  # VectorE
                z = nl.ndarray((128, 4096), nl.float32)
                nisa.activation(dst=z, op=nl.tanh, data=y if dependent else x)  # ScalarE
                if dependent:
                    x = z
        return cost.estimate(ctx.trace, ctx.target)

    free, chained = run(False), run(True)
    total = free.busy_s["vector"] + free.busy_s["scalar"]
    assert free.estimated_s < 0.75 * total  # the two engines ran side by side
    assert math.isclose(free.estimated_s, free.bound_s, rel_tol=0.2)
    assert chained.estimated_s >= 0.999 * total  # a dependency chain serializes them


def test_rule_matmul_must_not_accumulate_onto_engine_writes():
    with _rule("matmul-accumulate-engine-write"):
        p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        nisa.nc_matmul(dst=p, stationary=_bf((128, 128)), moving=_bf((128, 64)))
    with emulate("trn2"):  # overwriting is fine, and the tile is then a matmul accumulation group
        p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        nisa.nc_matmul(dst=p, stationary=_bf((128, 128)), moving=_bf((128, 64)), accumulate=False)
        nisa.nc_matmul(dst=p, stationary=_bf((128, 128)), moving=_bf((128, 64)))


def test_row_softmax_kernel_composes_the_instructions(rng):
    """A flash-attention style row softmax: max on VectorE, exp(x - max) with a fused row sum on
    ScalarE, reciprocal and scale; against numpy."""

    @jit(target="trn1")
    def softmax(x):
        out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.load(x)
        row_max = nl.ndarray((x.shape[0], 1), nl.float32)
        nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=t, axis=1, negate=True, keepdims=True)
        e = nl.ndarray(x.shape, nl.float32)
        row_sum = nl.ndarray((x.shape[0], 1), nl.float32)
        nisa.activation_reduce(dst=e, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=row_sum, bias=row_max)
        inv = nl.ndarray((x.shape[0], 1), nl.float32)
        nisa.activation(dst=inv, op=nl.reciprocal, data=row_sum)
        y = nl.ndarray(x.shape, nl.bfloat16)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nl.store(out, y)
        return out

    x = (rng.standard_normal((128, 512)) * 4).astype(np.float32)
    ref = np.exp(x - x.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    got = softmax(x).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-6)  # bf16 output
    report = cost.estimate(softmax.last_context.trace, softmax.last_context.target)
    assert report.instructions == {"tensor": 0, "vector": 2, "scalar": 2, "gpsimd": 0, "dma": 2}
