"""FP8 quantization through the ``fp8_quantize`` op: every implementation (the Triton kernels
interpreted, with the formats its hardware writes, and the reference) bit for bit against the
float32 oracle, the oracle's error bound, non-finite inputs, the OCP -> FNUZ mapping, and bad input."""

from __future__ import annotations

import pytest
import torch

import ceiling
from ceiling import fp8
from ceiling.fp8 import reference

FORMATS = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def source(rows=70, cols=300, seed=0, dtype=torch.bfloat16):
    """Magnitudes spanning six decades across K (outliers in the tail), an all-zero corner
    (a block whose scale comes from the floor), NaN and both infinities."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 3, cols)
    x[5, 7] = 3e4  # an outlier inside an otherwise small group
    x[40:, 256:] = 0
    x[3, 5], x[10, 200], x[11, 0] = float("nan"), float("inf"), -float("inf")
    return x.to(dtype)


def pytest_generate_tests(metafunc):
    """The formats a class's implementation writes (its ``FORMATS``)."""
    if "dtype" in metafunc.fixturenames and metafunc.cls is not None:
        metafunc.parametrize("dtype", metafunc.cls.FORMATS, ids=str)


class QuantizeTest:
    """The cases every implementation of ``fp8_quantize`` is held to."""

    backend: str
    FORMATS = FORMATS

    @pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
    def test_matches_the_oracle_bit_for_bit(self, granularity, dtype):
        x = source()
        for transpose, pow2 in ((False, False), (True, False), (False, True)):
            q, s = fp8.quantize(x, granularity, dtype, transpose=transpose, pow2=pow2, backend=self.backend)
            rq, rs = reference.quantize(x, granularity, dtype, transpose=transpose, pow2=pow2)
            assert q.dtype == dtype and q.shape == ((300, 70) if transpose else (70, 300)) and q.is_contiguous()
            assert s.shape == fp8.scale_shape(granularity, *q.shape) and s.stride() == rs.stride()
            assert torch.equal(s, rs), f"scales differ (transpose={transpose}, pow2={pow2})"
            assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)), \
                f"codes differ (transpose={transpose}, pow2={pow2})"


class TestReference(QuantizeTest):
    """The oracle through the op: its layouts (1x128 scales column-major) survive the custom op."""

    backend = "reference"


class TestNvidia(QuantizeTest):
    """The Triton kernels with the OCP formats Hopper converts to."""

    backend = "nvidia"
    FORMATS = [torch.float8_e4m3fn, torch.float8_e5m2]


class TestAmd(QuantizeTest):
    """The same kernels with the FNUZ formats CDNA3 converts to."""

    backend = "amd"
    FORMATS = [torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


@pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
def test_oracle_error_bound_and_specials(granularity):
    """Each finite value comes back within half an FP8 step of itself (relative), plus half the
    smallest subnormal times its scale; the amax of every group lands on the format's max;
    NaN stays NaN and an infinity stays infinite (e5m2) or becomes NaN (e4m3fn)."""
    x = source(dtype=torch.float32)
    for dtype, mantissa, tiny in ((torch.float8_e4m3fn, 3, 2.0**-9), (torch.float8_e5m2, 2, 2.0**-16)):
        q, s = reference.quantize(x, granularity, dtype)
        back = fp8.dequantize(q, s, granularity)
        scale = reference.expand(s, granularity, *x.shape)
        finite = torch.isfinite(x)
        bound = 2.0 ** -(mantissa + 1) * x.abs() + scale * tiny / 2
        assert ((back - x).abs() <= bound)[finite].all()
        assert q.float().abs()[finite].max() == fp8.format_of(dtype).max
        assert back[3, 5].isnan()
        if dtype == torch.float8_e5m2:
            assert back[10, 200] == float("inf") and back[11, 0] == -float("inf")
        else:
            assert back[10, 200].isnan() and back[11, 0].isnan()
    # the zero block dequantizes to zeros with a finite, positive scale
    q, s = reference.quantize(x, "128x128", torch.float8_e4m3fn)
    assert (s > 0).all() and torch.isfinite(s).all() and (fp8.dequantize(q, s, "128x128")[40:, 256:] == 0).all()


def test_pow2_scales_are_powers_of_two_that_cover_the_amax():
    x = source(dtype=torch.float32)
    q, s = reference.quantize(x, "1x128", torch.float8_e4m3fn, pow2=True)
    mantissa = s.view(torch.int32) & 0x7FFFFF
    assert (mantissa == 0).all()
    assert q.float().abs()[torch.isfinite(x)].max() <= 448


def test_ocp_to_fnuz_halves_every_finite_code_exactly():
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
        mapped = fp8.ocp_to_fnuz(codes)
        half, got = codes.float() / 2, mapped.float()
        finite = torch.isfinite(half)
        assert torch.equal(got[finite], half[finite])
        assert got[~finite].isnan().all()
        assert mapped.view(torch.uint8)[0x80] == 0  # negative zero is zero, not the FNUZ NaN


def test_interpreted_fp8_casts_round_to_nearest_even_and_keep_nan():
    """The interpreter fix (ceiling.triton_runtime): a tie rounds to even, NaN decodes as NaN."""
    import triton
    import triton.language as tl

    from ceiling.triton_runtime import interpreted

    @triton.jit
    def roundtrip(x_ptr, q_ptr, y_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        q = tl.load(x_ptr + r).to(q_ptr.dtype.element_ty)
        tl.store(q_ptr + r, q)
        tl.store(y_ptr + r, q.to(tl.float32))

    x = torch.tensor([1.0625, 1.1875, -3.3, 2.0**-10, 240.0, float("nan"), 0.0, -0.0])
    for dtype in FORMATS:
        q = torch.empty(8, dtype=dtype)
        y = torch.empty(8)
        interpreted(roundtrip)[(1,)](x, q, y, N=8)
        want = x.to(dtype)
        assert torch.equal(q.view(torch.uint8), want.view(torch.uint8)), dtype
        torch.testing.assert_close(y, want.float(), equal_nan=True)


def test_quantize_is_one_node_under_torch_compile():
    x = torch.randn(33, 130, generator=torch.Generator().manual_seed(3))

    def f(t):
        q, s = fp8.quantize(t, "1x128", torch.float8_e4m3fn)
        return fp8.dequantize(q, s, "1x128")

    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x), f(x))
    from ceiling.fp8 import spec
    from ceiling.fp8.op import FP8_QUANTIZE

    call = FP8_QUANTIZE.select(spec.check(x, "128x128", torch.float8_e4m3fn, "reference", transpose=True), "reference")
    torch.library.opcheck(torch.ops.ceiling.fp8_quantize.default, (x, call.key()))


@pytest.mark.parametrize(
    "args,kwargs,argument",
    [
        ((torch.randn(2, 3, 4),), {}, "x"),
        ((torch.randn(4, 4).to(torch.float64),), {}, "x"),
        ((torch.randn(4, 4),), {"granularity": "1x64"}, "granularity"),
        ((torch.randn(4, 4),), {"dtype": torch.bfloat16}, "dtype"),
        ((torch.randn(4, 4),), {"backend": "tpu"}, "backend"),
        (([[1.0]],), {}, "x"),
    ],
)
def test_bad_input_is_named(args, kwargs, argument):
    with pytest.raises(ceiling.InputError) as err:
        fp8.quantize(*args, **kwargs)
    assert err.value.argument == argument


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
def test_quantizers_compile_to_the_hardware_fp8_convert_without_spills(target):
    """Every quantizer compiles for the target with no spills; the cast is the hardware's FP8 convert
    (sm_90a: F2FP.SATFINITE.E4M3; gfx942: v_cvt_pk_fp8_f32) wherever codes are written."""
    import re

    from ceiling.triton.fp8_quantize_specs import compile_specs, compile_specs_fnuz
    from ceiling.isa import compile_for, sass

    specs = compile_specs() if target == "sm_90a" else compile_specs_fnuz()
    for spec in specs:
        kernel = compile_for(spec, target)
        text = sass(kernel.asm["cubin"]) if target == "sm_90a" else kernel.asm["amdgcn"]
        if target == "sm_90a":
            assert "LDL" not in text and "STL" not in text, spec.name
        else:
            assert re.search(r"ScratchSize:\s+0\b", text), spec.name
        if spec.config["kernel"] != "tensor_amax":
            convert = r"F2FP\.SATFINITE\.E4M3" if target == "sm_90a" else r"v_cvt_pk_fp8_f32"
            assert re.search(convert, text), f"{spec.name}: no hardware FP8 convert"
