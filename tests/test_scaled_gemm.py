"""The scaled (FP8) GEMM ops through their public functions: ``scaled_gemm`` (one class of cases, a
subclass per implementation: the reference, the Hopper and CDNA3 kernels under the Triton
interpreter) against a float64 product of the dequantized inputs by the error-ratio rule, non-finite
inputs, empty dimensions, poisoned outputs; ``fp8_gemm`` (both backward precisions) against float64
straight-through gradients; the custom ops under ``torch.compile``, the JAX front end, bad input, the
tuning sweep's table entries, and the compiled kernels' static facts."""

from __future__ import annotations

import math

import pytest
import torch

import ceiling
from ceiling import fp8
from ceiling.scaled_gemm import reference as ref_mod
from ceiling.testing.numerics import assert_close, stable_seed

# Small tiles keep the interpreter fast; three persistent programs walk several tiles each.
NV_SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_stages=2, num_warps=4, PROMOTE_STEPS=1,
                STREAM_K=False, EPILOGUE_SUBTILE=False)
AMD_SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, PROMOTE_STEPS=1)
KINDS = ("tensor", "row", "1x128", "128x128")


def operands(m, n, k, a_kind, b_kind, seed=0, dtype=torch.float8_e4m3fn, b_dtype=None, outliers=True):
    """Quantized a (M, K) and b = w.mT for a weight w (N, K), with their scales. With ``outliers``
    the magnitudes span six decades along K and across rows, so every scale matters."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g)
    if outliers:
        x = x * torch.logspace(-3, 3, k)[None, :] * torch.logspace(0, 2, m)[:, None]
        w = w * torch.logspace(2, -2, k)[None, :]
    aq, a_s = fp8.quantize(x, a_kind, dtype)
    bq, b_s = fp8.quantize(w, b_kind, b_dtype or dtype)
    return aq, bq.mT, a_s, b_s if b_kind == "tensor" else b_s.mT


def check(aq, bq, a_s, b_s, backend, config, bias=None, activation=None, out_dtype=torch.bfloat16, atol=1e-2):
    """Our output within twice the error of the same float32 computation rounded to the output dtype,
    plus ``atol`` ulps of the output at the result's scale, against float64."""
    out = ceiling.scaled_gemm(aq, bq, a_s, b_s, bias=bias, activation=activation, out_dtype=out_dtype,
                              backend=backend, config=config)
    exact = ref_mod.scaled_gemm(aq, bq, a_s, b_s, bias, activation, torch.float64, compute_dtype=torch.float64)
    framework = ref_mod.scaled_gemm(aq, bq, a_s, b_s, bias, activation, out_dtype)  # float32 math, then the cast
    assert out.dtype == out_dtype and out.shape == exact.shape
    assert_close("out", out, framework, exact, atol=atol * torch.finfo(out_dtype).eps)
    return out


def pytest_generate_tests(metafunc):
    """A class's scale kind pairings and operand formats (its ``PAIRS`` and ``FORMATS``)."""
    for name in ("pair", "fp8_dtype"):
        if name in metafunc.fixturenames:
            values = getattr(metafunc.cls, {"pair": "PAIRS", "fp8_dtype": "FORMATS"}[name])
            metafunc.parametrize(name, values, ids=[str(v).removeprefix("torch.").replace("'", "") for v in values])


# ----------------------------------------------------------------------------- scaled_gemm, per implementation


class ScaledGemmTest:
    """The cases every implementation of ``scaled_gemm`` is held to."""

    backend: str
    config: dict | None = None  # small tiles for the interpreter
    PAIRS = [(a, b) for a in KINDS for b in KINDS]
    FORMATS = (torch.float8_e4m3fn,)
    PAIR_SHAPE = (20, 45, 200)

    def pair_seed(self, pair) -> int:
        return stable_seed(*pair) % 1000

    def configs(self) -> list[dict | None]:
        """The configs each case runs with (a Hopper case runs persistent and stream-K)."""
        return [self.config]

    def config_for(self, a_kind: str, b_kind: str) -> dict | None:
        return self.config

    def test_every_scale_kind_pair(self, pair, fp8_dtype):
        """Odd sizes (N odd, K not a multiple of 128 or of the tile), outliers, the pairings of kinds."""
        check(*operands(*self.PAIR_SHAPE, *pair, seed=self.pair_seed(pair), dtype=fp8_dtype), self.backend,
              self.config_for(*pair))

    def test_odd_shapes(self):
        """M = 1, N odd, K not a multiple of 16 (TMA needs the FP8 rows padded), a K shorter than a tile."""
        for config in self.configs():
            for m, n, k in ((1, 33, 200), (5, 7, 13), (64, 129, 130)):
                check(*operands(m, n, k, "1x128", "128x128", seed=k), self.backend, config)

    @pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
    def test_epilogues_and_output_dtypes(self, activation):
        g = torch.Generator().manual_seed(11)
        aq, bq, a_s, b_s = operands(40, 48, 160, "row", "row", seed=5)
        bias = torch.randn(48, generator=g) * 50
        for config, bias_dtype, out_dtype in self.epilogue_cases():
            check(aq, bq, a_s, b_s, self.backend, config, bias=bias.to(bias_dtype), activation=activation,
                  out_dtype=out_dtype)

    def epilogue_cases(self) -> list[tuple[dict | None, torch.dtype, torch.dtype]]:
        return [(self.config, torch.float32, torch.bfloat16)]

    def test_every_output_element_is_written(self, monkeypatch):
        """Outputs, workspaces and padded copies allocated as NaN: a missed element would show."""
        real_empty = torch.empty

        def poisoned(*args, **kwargs):
            t = real_empty(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t

        monkeypatch.setattr(torch, "empty", poisoned)
        for config in self.configs():
            check(*operands(37, 45, 130, "1x128", "128x128", seed=1), self.backend, config)

    def test_nan_and_inf_inputs_propagate_to_exactly_the_outputs_they_touch(self):
        """A NaN code in a makes its output row NaN, one in b its output column; an e5m2 infinity
        makes its row non-finite; a NaN scale poisons what it scales; nothing else changes."""
        for config in self.configs():
            aq, bq, a_s, b_s = operands(37, 45, 130, "1x128", "128x128", seed=2, outliers=False)
            aq, bq = aq.clone(), bq.mT.contiguous().mT
            aq.view(torch.uint8)[3, 5] = 0x7F  # e4m3fn NaN
            bq.mT.view(torch.uint8)[7, 100] = 0xFF  # -NaN in column 7
            out = ceiling.scaled_gemm(aq, bq, a_s, b_s, backend=self.backend, config=config, out_dtype=torch.float32)
            nan = torch.zeros(37, 45, dtype=torch.bool)
            nan[3, :] = True
            nan[:, 7] = True
            assert torch.equal(out.isnan(), nan)
            a5, b5, s5, t5 = operands(9, 12, 64, "row", "tensor", seed=4, dtype=torch.float8_e5m2, outliers=False)
            a5 = a5.clone()
            a5.view(torch.uint8)[2, 0] = 0x7C  # +inf
            s5 = s5.clone()
            s5[6, 0] = float("nan")
            out = ceiling.scaled_gemm(a5, b5, s5, t5, backend=self.backend, config=self.unpromoted(config),
                                      out_dtype=torch.float32)
            bad = ~torch.isfinite(out)
            assert bad[2].all() and out[6].isnan().all() and not bad[[r for r in range(9) if r not in (2, 6)]].any()

    def unpromoted(self, config: dict | None) -> dict | None:
        """``config`` for tensor and row scales, where an implementation may leave promotion out."""
        return config

    def test_empty_and_zero_k(self):
        aq = torch.zeros(3, 0, dtype=torch.float8_e4m3fn)
        bq = torch.zeros(0, 5, dtype=torch.float8_e4m3fn)
        bias = torch.randn(5)
        one = torch.ones(())
        out = ceiling.scaled_gemm(aq, bq, one, one, bias=bias, activation="relu", out_dtype=torch.float32,
                                  backend=self.backend)
        torch.testing.assert_close(out, torch.relu(bias).expand(3, 5))


class TestReference(ScaledGemmTest):
    backend = "reference"
    PAIRS = [("tensor", "tensor"), ("1x128", "128x128")]

    def test_default_dispatch_on_cpu_tensors_is_the_reference(self):
        aq, bq, a_s, b_s = operands(9, 17, 70, "1x128", "128x128")
        out = ceiling.scaled_gemm(aq, bq, a_s, b_s)  # CPU tensors: the reference
        torch.testing.assert_close(out, ref_mod.scaled_gemm(aq, bq, a_s, b_s))
        assert out.dtype == torch.bfloat16


class TestNvidia(ScaledGemmTest):
    backend = "nvidia"
    config = NV_SMALL

    def configs(self):
        return [NV_SMALL, dict(NV_SMALL, STREAM_K=True)]

    def epilogue_cases(self):
        return [(NV_SMALL, torch.float32, torch.bfloat16),
                (dict(NV_SMALL, EPILOGUE_SUBTILE=True), torch.bfloat16, torch.float32)]

    @pytest.mark.parametrize("a_kind,b_kind", [("tensor", "tensor"), ("row", "row"), ("1x128", "128x128"),
                                               ("128x128", "1x128")])
    def test_stream_k_splits_tiles_and_resets_its_semaphores(self, a_kind, b_kind):
        """Stream-K with tiles split between programs (one tile split three ways, too): the fixed-up
        result is right, and every semaphore is back at zero for the next launch."""
        from ceiling.nvidia import stream_k

        cfg = dict(NV_SMALL, STREAM_K=True)
        for m, n, k in ((37, 45, 300), (20, 20, 400), (1, 33, 200)):
            check(*operands(m, n, k, a_kind, b_kind, seed=m), "nvidia", cfg)
        assert all(int(buf.abs().sum()) == 0 for buf in stream_k._semaphores.values())

    def test_e5m2_operands_and_promotion_intervals(self):
        """e5m2 x e4m3 (a gradient against a weight), and every promotion interval including none."""
        aq, bq, a_s, b_s = operands(33, 40, 300, "1x128", "tensor", seed=7, dtype=torch.float8_e5m2,
                                    b_dtype=torch.float8_e4m3fn)
        for steps, bk in ((1, 32), (2, 64), (4, 32)):
            check(aq, bq, a_s, b_s, "nvidia", dict(NV_SMALL, BLOCK_K=bk, PROMOTE_STEPS=steps))
        aq, bq, a_s, b_s = operands(33, 40, 300, "row", "tensor", seed=8, dtype=torch.float8_e5m2)
        for steps in (0, 3):
            check(aq, bq, a_s, b_s, "nvidia", dict(NV_SMALL, PROMOTE_STEPS=steps))


class TestAmd(ScaledGemmTest):
    """CDNA3: FNUZ operands as it takes them; OCP ones mapped exactly (same bits, scales doubled)."""

    backend = "amd"
    config = AMD_SMALL
    PAIRS = [("tensor", "tensor"), ("row", "row"), ("1x128", "128x128"), ("row", "1x128")]
    FORMATS = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
    PAIR_SHAPE = (37, 45, 300)

    def pair_seed(self, pair):
        return 3

    def config_for(self, a_kind, b_kind):
        return self.unpromoted(AMD_SMALL) if {a_kind, b_kind} <= {"tensor", "row"} else AMD_SMALL

    def unpromoted(self, config):
        return dict(config, PROMOTE_STEPS=0)

    def epilogue_cases(self):
        return [(dict(AMD_SMALL, PROMOTE_STEPS=0), torch.float16, torch.float16)]


# ----------------------------------------------------------------------------- contract


def _q(shape, dtype=torch.float8_e4m3fn):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize(
    "args,kwargs,argument,fragment",
    [
        ((_q((4, 200)), _q((200, 3)), torch.ones(4, 3), torch.ones(())), {}, "a_scale", "(4, 2) (1x128"),
        ((_q((4, 200)), _q((200, 3)), torch.ones(()), torch.ones(3, 1)), {}, "b_scale", "(1, 3) (row)"),
        ((_q((4, 200)), _q((200, 3)), torch.ones((), dtype=torch.float16), torch.ones(())), {}, "a_scale", "float32"),
        ((_q((4, 200)), _q((200, 3)), [1.0], torch.ones(())), {}, "a_scale", "torch.Tensor"),
        ((torch.randn(4, 8).bfloat16(), _q((8, 3)), torch.ones(()), torch.ones(())), {}, "a", "FP8 dtype"),
        ((_q((4, 8)), _q((8, 3), torch.float8_e4m3fnuz), torch.ones(()), torch.ones(())), {}, "b", "family"),
        ((_q((4, 8)), _q((9, 3)), torch.ones(()), torch.ones(())), {}, "b", "inner dimension 8"),
        ((_q((2, 4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {}, "a", "2-D"),
        ((_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {"bias": torch.ones(4)}, "bias", "shape (3,)"),
        ((_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {"out_dtype": torch.float8_e4m3fn}, "out_dtype",
         "one of"),
        ((_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {"activation": "tanh"}, "activation", "one of"),
        ((_q((4, 8), torch.float8_e4m3fnuz), _q((8, 3), torch.float8_e4m3fnuz), torch.ones(()), torch.ones(())),
         {"backend": "nvidia"}, "a", "OCP"),
        ((_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {"backend": "nvidia", "config": {"TILE": 1}},
         "config", "keys among"),
        ((_q((4, 200)), _q((200, 3)), torch.ones(4, 2), torch.ones(2, 1)),
         {"backend": "nvidia", "config": dict(NV_SMALL, PROMOTE_STEPS=0)}, "config", "PROMOTE_STEPS >= 1"),
        ((_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(())), {"backend": "cuda"}, "backend", "one of"),
    ],
)
def test_bad_input_is_named_before_launch(args, kwargs, argument, fragment, monkeypatch):
    import ceiling.amd.gemm_fp8 as amd
    import ceiling.nvidia.gemm_fp8 as nv

    if argument != "config":
        monkeypatch.setattr(nv, "forward", lambda *a, **k: pytest.fail("kernel launched on bad input"))
        monkeypatch.setattr(amd, "forward", lambda *a, **k: pytest.fail("kernel launched on bad input"))
    with pytest.raises(ceiling.InputError) as err:
        ceiling.scaled_gemm(*args, **kwargs)
    assert err.value.argument == argument
    assert fragment in str(err.value)


def test_fp8_operands_that_require_grad_are_refused():
    a = _q((4, 8)).requires_grad_()
    with pytest.raises(ceiling.InputError, match="ceiling.fp8_gemm"):
        ceiling.scaled_gemm(a, _q((8, 3)), torch.ones(()), torch.ones(()))


def test_tpu_and_trainium_say_why():
    for op in ("scaled_gemm", "fp8_gemm"):
        tpu = ceiling.backends.op_availability(op, "tpu")
        trainium = ceiling.backends.op_availability(op, "trainium")
        assert tpu.mode == "unavailable" and "e4m3fn" in tpu.reason
        assert trainium.mode == "unavailable" and "trn2" in trainium.reason
    with pytest.raises(ceiling.BackendUnavailable, match="TPU7x"):
        ceiling.scaled_gemm(_q((4, 8)), _q((8, 3)), torch.ones(()), torch.ones(()), backend="tpu")
    with pytest.raises(ceiling.BackendUnavailable, match="trn2"):
        ceiling.fp8_gemm(torch.randn(4, 8), torch.randn(8, 3), backend="trainium")


# ----------------------------------------------------------------------------- custom ops, autograd


def test_custom_ops_compile_without_graph_breaks_and_pass_opcheck():
    aq, bq, a_s, b_s = operands(16, 24, 130, "1x128", "128x128", seed=9)
    bias = torch.randn(24)

    def f(aq, bq, a_s, b_s, bias):
        return ceiling.scaled_gemm(aq, bq, a_s, b_s, bias=bias, activation="gelu", backend="reference")

    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(aq, bq, a_s, b_s, bias), f(aq, bq, a_s, b_s, bias))
    # test_schema compares FP8 inputs with torch.allclose, which has no FP8 kernel on the CPU
    torch.library.opcheck(torch.ops.ceiling.scaled_gemm.default,
                          (aq, bq, a_s, b_s, bias.requires_grad_(), _call_key("scaled_gemm", aq, bq, a_s, b_s, bias,
                                                                              activation="gelu")),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    x = torch.randn(16, 130, requires_grad=True)
    w = torch.randn(24, 130, requires_grad=True)

    def g(x, w, bias):
        return ceiling.fp8_gemm(x, w.mT, recipe="block", bias=bias, activation="silu", grad_precision="fp8",
                                backend="reference")

    compiled = torch.compile(g, fullgraph=True, backend="aot_eager")(x, w, bias)
    eager = g(x, w, bias)
    torch.testing.assert_close(compiled, eager)
    dout = torch.randn_like(eager)
    for got, want in zip(torch.autograd.grad(compiled, (x, w), dout), torch.autograd.grad(eager, (x, w), dout)):
        torch.testing.assert_close(got, want)  # the backward traced by AOTAutograd, too
    # test_aot_dispatch_dynamic sums every output, and the FP8 ones have no CPU sum kernel; the
    # compiled forward and backward above cover it.
    x2, w2 = x.detach().requires_grad_(), w.detach().mT.requires_grad_()
    torch.library.opcheck(torch.ops.ceiling.fp8_gemm.default,
                          (x2, w2, bias.detach(), _call_key("fp8_gemm", x2, w2, bias, recipe="row", activation=None,
                                                            out_dtype="float32", grad_precision="bf16")),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def _call_key(op: str, *arrays, **static) -> str:
    """The call string a public function hands its custom op, for these arrays on the reference."""
    from ceiling.op import get

    op = get(op)
    static = {**static, "backend": "reference"} if op.name == "fp8_gemm" else static
    return op.select(op.check(*arrays, **static), "reference").key()


def _ste_reference(x, w, bias, activation, recipe, dout, e4=torch.float8_e4m3fn):
    """Float64 output and straight-through gradients of activation(deq(q(x)) @ deq(q(w)).T + bias)."""
    from ceiling.fp8 import reference
    from ceiling.gemm.reference import activate_torch
    from ceiling.scaled_gemm import RECIPES

    ka, kb = RECIPES[recipe]
    xq = reference.dequantize(*reference.quantize(x, ka, e4), ka).double().requires_grad_()
    wq = reference.dequantize(*reference.quantize(w, kb, e4), kb).double().requires_grad_()
    b64 = bias.detach().double().requires_grad_()
    out = activate_torch(xq @ wq.T + b64, activation)
    return (out, *torch.autograd.grad(out, (xq, wq, b64), dout.double()))


class Fp8GemmTest:
    """``fp8_gemm`` on an implementation against the float64 straight-through gradients. bf16
    backward: within the bf16 GEMM's error; fp8 backward: within twice the error of the same
    e5m2-quantized computation done in float32 by the framework, plus bf16 rounding."""

    backend: str
    config: dict | None = None
    formats = (torch.float8_e4m3fn, torch.float8_e5m2)

    @pytest.mark.parametrize("recipe", ["tensor", "row", "block"])
    @pytest.mark.parametrize("grad_precision", ["bf16", "fp8"])
    def test_forward_and_every_gradient(self, recipe, grad_precision):
        g = torch.Generator().manual_seed(stable_seed(recipe, grad_precision) % 1000)
        m, n, k = 20, 24, 150
        x = (torch.randn(m, k, generator=g) * torch.logspace(-1, 1, k)).bfloat16().requires_grad_()
        w = torch.randn(n, k, generator=g).bfloat16().requires_grad_()
        bias = torch.randn(n, generator=g).bfloat16().requires_grad_()
        dout = torch.randn(m, n, generator=g).bfloat16()
        out = ceiling.fp8_gemm(x, w.mT, recipe=recipe, bias=bias, activation="gelu", grad_precision=grad_precision,
                               backend=self.backend, config=self.config)
        assert out.dtype == torch.bfloat16
        got = torch.autograd.grad(out, (x, w, bias), dout)
        want = _ste_reference(x.detach().float(), w.detach().float(), bias, "gelu", recipe, dout.float(),
                              self.formats[0])
        framework = _framework_grads(x.detach().float(), w.detach().float(), bias, recipe, grad_precision,
                                     dout.float(), *self.formats)
        assert_close("out", out, want[0].to(torch.bfloat16), want[0], atol=1e-2)
        for name, ours, exact, low in zip(("grad a", "grad b", "grad bias"), got, want[1:], framework):
            assert ours.shape == exact.shape and ours.dtype == torch.bfloat16
            assert_close(name, ours, low, exact, atol=2e-2)


class TestFp8GemmReference(Fp8GemmTest):
    backend = "reference"


class TestFp8GemmNvidia(Fp8GemmTest):
    backend = "nvidia"
    config = NV_SMALL


class TestFp8GemmAmd(Fp8GemmTest):
    """FNUZ operands and gradients, as CDNA3 multiplies them."""

    backend = "amd"
    config = AMD_SMALL
    formats = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def _framework_grads(x, w, bias, recipe, grad_precision, dout, e4=torch.float8_e4m3fn, e5=torch.float8_e5m2):
    """The same backward by plain PyTorch in float32: bf16 operands (bf16 mode), or the e5m2
    gradients and re-quantized operands the fp8 mode uses, dequantized."""
    from ceiling.fp8 import reference
    from ceiling.gemm.reference import activation_grad_torch
    from ceiling.scaled_gemm import RECIPES

    ka, kb = RECIPES[recipe]
    xq, xs = reference.quantize(x, ka, e4)
    wq, ws = reference.quantize(w, kb, e4)
    xd, wd = reference.dequantize(xq, xs, ka), reference.dequantize(wq, ws, kb)
    z = xd @ wd.T + bias.float()
    dz = dout * activation_grad_torch(z, "gelu")
    dbias = dz.sum(0)
    if grad_precision == "bf16":
        lo = lambda t: t.bfloat16().float()  # noqa: E731
        return lo(dz) @ lo(wd), lo(dz).T @ lo(xd), dbias
    if kb == "row":
        gq, gs = reference.quantize(dz * ws.reshape(1, -1), ka, e5)
        da = reference.dequantize(gq, gs, ka) @ wq.float()
    else:
        gq, gs = reference.quantize(dz, ka, e5)
        da = reference.dequantize(gq, gs, ka) @ wd
    if ka == "row":
        gq, gs = reference.quantize(dz * xs.reshape(-1, 1), ka, e5, transpose=True)
        db = reference.dequantize(gq, gs, ka) @ xq.float()
    elif ka == "tensor":
        gq, gs = reference.quantize(dz, ka, e5, transpose=True)
        db = reference.dequantize(gq, gs, ka) @ xd
    else:
        xt = reference.dequantize(*reference.quantize(xd, "1x128", e4, transpose=True), "1x128")
        gq, gs = reference.quantize(dz, ka, e5, transpose=True)
        db = reference.dequantize(gq, gs, ka) @ xt.T
    return da, db, dbias


def test_fp8_gemm_bad_input():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    for kwargs, argument in (({"recipe": "1x64"}, "recipe"), ({"grad_precision": "fp16"}, "grad_precision")):
        with pytest.raises(ceiling.InputError) as err:
            ceiling.fp8_gemm(x, w, **kwargs)
        assert err.value.argument == argument
    with pytest.raises(ceiling.InputError):
        ceiling.fp8_gemm(torch.randn(2, 4, 8), w)


def test_fp8_sweep_rows_become_table_entries(tmp_path, monkeypatch):
    """The FP8 sweep's winners (rows made up here; the sweep needs the GPU) become table entries of the
    device that the op then resolves for that device, scale kinds and shape; wrong ones never win."""
    import shutil

    from ceiling import tables
    from ceiling.op import get, resolve_config
    from ceiling.nvidia.gemm_fp8_specs import problem
    from ceiling.tuning import gemm_fp8 as tune_fp8

    shutil.copytree(tables.ROOT / "nvidia" / "tables", tmp_path / "nvidia" / "tables")
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    fast, slow, wrong = (dict(NV_SMALL, BLOCK_M=bm) for bm in (64, 128, 256))
    common = dict(shape=[16, 4096, 4096], dtype="float8_e4m3fn", scales="1x128/128x128", scaling="block")
    rows = [dict(common, impl="dequant+torch.matmul", config=None, median_ms=0.05),
            dict(common, impl="ceiling.nvidia", config=slow, median_ms=0.03, rel_error=1e-3),
            dict(common, impl="ceiling.nvidia", config=fast, median_ms=0.02, rel_error=1e-3),
            dict(common, impl="ceiling.nvidia", config=wrong, median_ms=0.01, rel_error=0.5),
            dict(common, impl="ceiling.nvidia", config=fast, error="CompilationError: ...")]
    best = tune_fp8.best_per_shape(rows)
    (winner,) = best.values()
    assert winner["config"] == fast and winner["speedup"] == pytest.approx(2.5)
    assert tune_fp8.device_key("NVIDIA H200") == "H200"
    tune_fp8.apply("H200", tune_fp8.table_entries(best, "NVIDIA H200", "2026-12-01", "abc1234"))
    impl = get("scaled_gemm").implementation("nvidia")
    cfg = resolve_config(problem(16, 4096, 4096, "1x128", "128x128"), impl, None)
    assert cfg.as_dict() == fast and "H200#" in cfg.source
    other = resolve_config(problem(16, 4096, 4096, "tensor", "tensor"), impl, None)
    assert other.source == "heuristic"


# ----------------------------------------------------------------------------- JAX


def test_jax_on_a_gpu_is_refused_for_the_triton_backends_with_the_reason(monkeypatch):
    """The FP8 kernels have no jax-triton launcher: on a JAX GPU the op says so and names the
    backend that works there, for each Triton backend; the reference still runs."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from ceiling.fp8.reference import quantize_jax

    x = jax.random.normal(jax.random.PRNGKey(5), (9, 130), jnp.float32)
    aq, a_s = quantize_jax(x, "tensor", jnp.float8_e4m3fn)
    bq, b_s = quantize_jax(x[:7], "tensor", jnp.float8_e4m3fn)  # a (7, 130) weight: b = bq.T
    expected = ceiling.scaled_gemm(aq, bq.T, a_s, b_s, backend="reference")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    for backend in ("nvidia", "amd"):
        with pytest.raises(ceiling.BackendUnavailable, match=f"backend='{backend}'.*use backend='reference'"):
            ceiling.scaled_gemm(aq, bq.T, a_s, b_s, backend=backend)
    assert jnp.array_equal(ceiling.scaled_gemm(aq, bq.T, a_s, b_s, backend="reference"), expected)


def test_jax_front_end():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    from ceiling.fp8.reference import dequantize_jax, quantize_jax

    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((21, 150)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((27, 150)), jnp.float32)
    # the jnp quantizer follows the torch oracle's rules; XLA's float32 division on the CPU is not
    # correctly rounded, so a scale may differ in its last bit and a code sitting on a rounding
    # boundary by one step
    for granularity in KINDS:
        q, s = jax.jit(quantize_jax, static_argnums=(1,))(x, granularity)
        tq, ts = fp8.quantize(torch.from_numpy(np.asarray(x)), granularity, backend="reference")
        np.testing.assert_allclose(np.asarray(s), ts.numpy(), rtol=3e-7)
        np.testing.assert_allclose(np.asarray(q, np.float32), tq.float().numpy(), rtol=2.0**-3)
        assert (np.asarray(q).view(np.uint8) != tq.view(torch.uint8).numpy()).mean() < 0.01
    aq, a_s = jax.jit(quantize_jax, static_argnums=(1,))(x, "1x128")
    wq, w_s = jax.jit(quantize_jax, static_argnums=(1,))(w, "128x128")
    for backend, config in (("reference", None), ("nvidia", NV_SMALL)):
        out = ceiling.scaled_gemm(aq, wq.T, a_s, w_s.T, backend=backend, config=config, out_dtype=jnp.float32)
        assert isinstance(out, jax.Array) and out.dtype == jnp.float32
        exact = (np.asarray(aq, np.float64) * np.repeat(np.asarray(a_s), 128, 1)[:, :150]) @ \
            (np.asarray(wq, np.float64) * np.repeat(np.repeat(np.asarray(w_s), 128, 0), 128, 1)[:27, :150]).T
        np.testing.assert_allclose(np.asarray(out, np.float64), exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max())
    cot = jnp.asarray(rng.standard_normal((21, 27)), jnp.float32)
    for precision in ("bf16", "fp8"):
        f = lambda x, w: jnp.sum(ceiling.fp8_gemm(x, w.T, recipe="block", grad_precision=precision,  # noqa: E731
                                                  backend="reference") * cot)
        gx, gw = jax.jit(jax.grad(f, argnums=(0, 1)))(x, w)
        want_x = np.asarray(cot, np.float64) @ np.asarray(dequantize_jax(wq, w_s, "128x128"), np.float64)
        assert np.isfinite(np.asarray(gx)).all() and np.isfinite(np.asarray(gw)).all()
        rel = np.abs(np.asarray(gx, np.float64) - want_x).max() / np.abs(want_x).max()
        assert rel < (0.02 if precision == "bf16" else 0.15), (precision, rel)


# ----------------------------------------------------------------------------- static facts


def _nvidia_specs():
    from ceiling.nvidia.gemm_fp8_specs import compile_specs

    return compile_specs()


NV_SPECS = _nvidia_specs()
# CI compiles one persistent kernel on block scales (the promotion with its scales) and one stream-K
# decode kernel (4-6 s each on two cores from an empty Triton cache); -m slow every shipped config.
NV_CI = [next(s for s in NV_SPECS if s.config["STREAM_K"] == streamed and s.config["scales"] == scales)
         for streamed, scales in ((False, "1x128/128x128"), (True, "tensor/tensor"))]


@pytest.mark.parametrize("spec", [s if s in NV_CI else pytest.param(s, marks=pytest.mark.slow) for s in NV_SPECS],
                         ids=lambda s: s.name)
def test_sm90a_fp8_wgmma_without_spills(spec):
    """Every shipped FP8 config compiles for sm_90a to FP8 wgmma (cuobjdump prints it as
    QGMMA...E4M3.E4M3), spills nothing, and fits in shared memory."""
    import re

    from ceiling.isa import compile_for, sass, sass_mix, _resource_usage
    from ceiling.nvidia.gemm import SMEM_LIMIT_SM90

    kernel = compile_for(spec, "sm_90a")
    text = sass(kernel.asm["cubin"])
    usage = _resource_usage(kernel.asm["cubin"])
    mix = sass_mix(text)
    assert re.search(r"QGMMA\.\d+x\d+x32\.F32\.E4M3\.E4M3", text), f"{spec.name}: no FP8 wgmma"
    assert mix.get("HGMMA", 0) == 0 and mix.get("HMMA", 0) == 0, f"{spec.name}: a 16-bit MMA crept in"
    assert usage.get("LOCAL", 0) + usage.get("STACK", 0) == 0 and mix.get("LDL", 0) + mix.get("STL", 0) == 0
    assert 0 < kernel.metadata.shared <= SMEM_LIMIT_SM90
    assert mix.get("UTMALDG", 0) > 0, "operands are not loaded by TMA"


def test_sm90a_check_sees_a_spilling_config():
    """The planted regression: a 64x256 promoted tile on one warpgroup (two 128-register
    accumulators a thread) must show up as spills, or the check above could not fail."""
    from ceiling.isa import profile
    from ceiling.nvidia.gemm_fp8_specs import compile_spec

    cfg = dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=2, num_warps=4, PROMOTE_STEPS=1,
               STREAM_K=False, EPILOGUE_SUBTILE=True)
    p = profile(compile_spec(cfg, "tensor", "tensor"), "sm_90a")
    assert p.extra["qgmma"] > 0 and p.spill_bytes + p.extra["ldl_stl"] > 0


def _amd_specs():
    from ceiling.amd.gemm_fp8_specs import compile_specs

    return compile_specs()


@pytest.mark.parametrize("spec", _amd_specs(), ids=lambda s: s.name)
def test_gfx942_fp8_mfma_without_scratch(spec):
    from ceiling.isa import profile

    p = profile(spec, "gfx942")
    fp8_mfma = {k: v for k, v in p.instruction_mix.items() if k.startswith("v_mfma_f32_") and k.endswith("_fp8_fp8")}
    assert fp8_mfma, f"{spec.name}: no FP8 MFMA in {sorted(k for k in p.instruction_mix if 'mfma' in k)}"
    assert p.spill_bytes == 0 and p.extra["vgpr_spill"] == 0
    assert 0 < p.shared_bytes <= 64 * 1024


# ----------------------------------------------------------------------------- on the device


@pytest.mark.gpu
@pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the CPU tests above "
                    "run the same kernel interpreted")
def test_on_gpu_against_float64_and_scaled_mm():
    """The compiled kernel on the device with the default configs: every scale kind pair on odd and
    LLM shapes against float64 of the dequantized inputs, and against torch._scaled_mm where it
    applies; the output fully written (poisoned), the trainable form's gradients finite."""
    for m, n, k in ((1, 4096, 4096), (333, 4097, 513), (2048, 2048, 2048)):
        for a_kind, b_kind in (("tensor", "tensor"), ("row", "row"), ("1x128", "128x128"), ("128x128", "1x128")):
            aq, bq, a_s, b_s = (t.cuda() for t in operands(m, n, k, a_kind, b_kind, seed=m + k))
            check(aq, bq, a_s, b_s, "nvidia", None, bias=torch.randn(n, device="cuda"), activation="gelu")
    aq, bq, a_s, b_s = (t.cuda() for t in operands(2048, 2048, 2048, "row", "row", seed=1, outliers=False))
    poison = torch.full((2048, 2048), float("nan"), device="cuda", dtype=torch.bfloat16)
    del poison  # the caching allocator hands this NaN block to the output: every element must be written
    ours = ceiling.scaled_gemm(aq, bq, a_s, b_s, backend="nvidia")
    assert not ours.isnan().any()
    theirs = torch._scaled_mm(aq, bq, a_s, b_s, out_dtype=torch.bfloat16)
    exact = ref_mod.scaled_gemm(aq, bq, a_s, b_s, None, None, torch.float64, compute_dtype=torch.float64)
    assert_close("out", ours, theirs, exact, atol=1e-2 / max(1.0, exact.abs().max().item()))
    x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(768, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for precision in ("bf16", "fp8"):
        out = ceiling.fp8_gemm(x, w.mT, recipe="block", grad_precision=precision)
        gx, gw = torch.autograd.grad(out, (x, w), torch.randn_like(out))
        assert torch.isfinite(gx).all() and torch.isfinite(gw).all()
        assert math.isfinite(float(out.float().abs().max()))
