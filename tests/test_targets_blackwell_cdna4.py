"""Blackwell (sm_100a, sm_103a) and CDNA4 (gfx950): the kernels compiled for them on the CPU, their
static facts, a planted regression per generation, the configs a B200/B300/MI355X resolves (never an
H200 entry that breaks a limit there), the Gluon kernels' refusal, the CLI's one-line errors and the
published device figures. Nothing here runs on such a device: correctness and speed there are not
measured."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from ceiling import isa, isolated, spaces, tables
from ceiling.errors import InputError
from ceiling.op import resolve_config
from ceiling.spaces.derive import breaks
from ceiling.triangle.spec import SHIPPED_GPUS

NEW = ("sm_100a", "sm_103a", "gfx950")
BASE = {"sm_100a": "sm_90a", "sm_103a": "sm_90a", "gfx950": "gfx942"}  # what each derives its configs from
FAMILIES = ("gemm", "gemm_fp8", "attention", "triangle_attention", "triangle_multiplication")


def on(target: str) -> dict:
    gpu, arch = SHIPPED_GPUS[target]
    return {"gpu": gpu, "arch": arch}


def gemm_problem(target: str, m: int = 4096, n: int = 4096, k: int = 4096, dtype: str = "bfloat16"):
    from ceiling.gemm.spec import shipped_problem

    return shipped_problem(m, n, k, dtype, **on(target))


# ------------------------------------------------------------------------------------ spaces


def test_every_triton_family_has_a_space_on_the_new_targets():
    for family in FAMILIES:
        assert set(NEW) <= set(spaces.targets(family)), family
    assert spaces.target_limits("sm_100a")["smem_per_block"] == 232448
    assert spaces.target_limits("sm_100a")["tmem_columns_per_unit"] == 512
    assert (spaces.target_limits("sm_100a")["units"], spaces.target_limits("sm_103a")["units"]) == (148, 160)
    assert spaces.target_limits("gfx950")["smem_per_block"] == 160 * 1024
    # the Gluon kernels are Hopper's only, and the Blackwell attention space does not take their tiles
    assert spaces.targets("attention_gluon") == ["sm_90a"]
    assert "gluon" not in spaces.get("attention", "sm_100a").parameters


def test_blackwell_space_keeps_what_the_compiler_showed_out_of_a_search():
    space = spaces.get("gemm", "sm_100a")
    ids = lambda cfg: {c.id for c, _ in space.broken(cfg, gemm_problem("sm_100a").features(), search=True)}  # noqa: E731
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8)
    assert ids(base) == set()
    assert "warp-specialized-spills" in ids({**base, "WARP_SPECIALIZE": True})
    assert "tcgen05-rows" in ids({**base, "BLOCK_M": 16, "num_warps": 4})
    assert "tensor-memory" in ids({**base, "BLOCK_M": 256, "BLOCK_N": 512, "num_stages": 1})
    # the same configs are fine on Hopper
    assert not spaces.get("gemm", "sm_90a").broken({**base, "WARP_SPECIALIZE": True}, None, search=True)


# ------------------------------------------------------------------------------------ dispatch


@pytest.mark.parametrize("target", NEW)
def test_a_new_gpu_resolves_its_own_target_within_its_limits(target):
    from ceiling.gemm.op import GEMM

    backend = spaces.target_info(target)["backend"]
    for m in (16, 256, 4096):
        problem = gemm_problem(target, m)
        config = resolve_config(problem, GEMM.implementation(backend), None)
        assert config.target == target, (m, config)
        assert not breaks("gemm", target, config.as_dict(), problem.features(), BASE[target]), config


def test_no_hopper_table_serves_a_blackwell_gpu():
    for family in FAMILIES:
        chain = tables.chain("nvidia", family, "NVIDIA B200", "sm_100a")
        assert not [d for d in chain if d in ("sm_90a", "H200", "H100")], (family, chain)


@pytest.mark.parametrize("family", ["gemm", "gemm_fp8"])
def test_every_hopper_entry_is_valid_on_blackwell_or_replaced(family):
    """Each shipped H100/H200/sm_90a entry: a point of the sm_100a space that breaks nothing there
    (search-only constraints too), or one the derivation moves to a point that does."""
    from ceiling.spaces.derive import fit

    context = {"M": 4096, "N": 4096, "K": 4096, "dtype_bytes": 1 if family == "gemm_fp8" else 2,
               "out_dtype_bytes": 2, "has_bias": 1}
    checked = replaced = 0
    for device in ("sm_90a", "H100", "H200"):
        path = tables.path("nvidia", device, family)
        if not path.exists():
            continue
        for entry in tables.read(path)["entries"]:
            config = {**entry["config"], **({"SCALES": "1x128/128x128"} if family == "gemm_fp8" else {})}
            context_here = {**context, **tables.pinned(entry)}
            checked += 1
            if breaks(family, "sm_100a", config, context_here, "sm_90a"):
                moved = fit(family, "sm_100a", config, context_here, "sm_90a")
                assert moved != config and not breaks(family, "sm_100a", moved, context_here, "sm_90a"), (entry, moved)
                replaced += 1
    assert checked > 0
    if family == "gemm":  # the H200's warp-specialized 128x256 entry spills on sm_100a: replaced
        assert replaced >= 1


@pytest.mark.parametrize("target", NEW)
def test_attention_and_triangle_configs_on_the_new_gpus(target):
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.triangle.op import TRIANGLE_ATTENTION, TRIANGLE_MULTIPLICATIVE_UPDATE
    from ceiling.triangle.spec import shipped_attention_problem, shipped_trimul_problem

    backend = spaces.target_info(target)["backend"]
    impl = ATTENTION.implementation(backend)
    for pad in (32, 64, 128, 256):
        for biased in (False, True):
            problem = shipped_problem(pad, "bfloat16", causal=not biased, biased=biased, **on(target))
            config = resolve_config(problem, impl, None)
            context = {**problem.features(), **impl.load().features(problem)}
            assert config.target == target
            # the Hopper/CDNA3 tiles it inherits, moved where the new space's constraints say
            assert not breaks("attention", target, config.as_dict(), context, BASE[target]), (pad, config)
    for op, problem in ((TRIANGLE_ATTENTION, shipped_attention_problem(32, "bfloat16", target=target)),
                        (TRIANGLE_MULTIPLICATIVE_UPDATE, shipped_trimul_problem("bfloat16", target=target))):
        config = resolve_config(problem, op.implementation(backend, "triton"), None)
        assert config.target == target, op.name
        assert not breaks(config.family, target, config.as_dict(), problem.features(), BASE[target]), (op.name, config)


def test_the_gluon_kernels_refuse_a_blackwell_gpu_before_compiling():
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.nvidia.gluon import attention as gluon

    problem = shipped_problem(128, "bfloat16", causal=True, **on("sm_100a"))
    with pytest.raises(InputError, match=r"device: expected a Hopper GPU \(sm_90\).*NVIDIA B200 \(sm_100\)"):
        gluon.forward(problem, None, None, None, None)  # refused before it reads an array or compiles
    with pytest.raises(InputError, match="sm_103"):
        gluon.backward(dataclasses.replace(problem, **on("sm_103a")), None, None, None, None)
    # asked for by config=, the op runs the Triton kernels for the Blackwell target instead
    forward = ATTENTION.implementation("nvidia", "gluon").load().choice(problem, {"implementation": "gluon"}, "forward")
    assert forward[0] is False and "sm_100" in forward[1]
    assert resolve_config(problem, ATTENTION.implementation("nvidia"), {"implementation": "gluon"}).target == "sm_100a"


# ------------------------------------------------------------------------------------ static facts


def test_isolated_call_survives_an_abort():
    with pytest.raises(isolated.Aborted, match=r"signal 6.*going down"):
        isolated.call("a test", lambda: (os.write(2, b"LLVM ERROR: going down\n"), os.abort()))
    assert isolated.call("a test", lambda x: x + 1, 41) == 42
    with pytest.raises(ZeroDivisionError):
        isolated.call("a test", lambda: 1 // 0)


def test_isolated_call_that_never_answers_is_killed(monkeypatch):
    monkeypatch.setattr(isolated, "TIMEOUT_S", 0.5)
    with pytest.raises(isolated.Aborted, match="no answer after 0.5 s"):
        isolated.call("a test", lambda: __import__("time").sleep(30))


def test_blackwell_gemm_facts():
    from ceiling.nvidia import gemm_specs

    from ceiling.gemm.op import GEMM

    config = resolve_config(gemm_problem("sm_100a"), GEMM.implementation("nvidia"), None).as_dict()
    facts = isa.profile(gemm_specs.compile_spec(config, target="sm_100a"), "sm_100a")
    extra = facts.extra
    assert extra["generation"] == "blackwell" and extra["utchmma"] > 0 and extra["hmma"] == 0
    assert 0 < extra["tmem_columns"] <= 512 and extra["ldtm"] > 0
    shape = f"f16 {config['BLOCK_M']}x{config['BLOCK_N']}x16 (cta_group::1)"
    assert extra["mma_shapes"] == {shape: extra["utchmma"]}
    assert facts.shared_bytes <= spaces.target_limits("sm_100a")["smem_per_block"]
    assert isa.problems(facts) == []


def test_sm103a_compiles_and_disassembles():
    from ceiling.triton import triangle_multiplication_specs as M

    spec = next(s for s in M.compile_specs("bfloat16", target="sm_103a") if "_contract_" in s.name)
    facts = isa.profile(spec, "sm_103a")
    assert facts.extra["utchmma"] > 0 and facts.extra["tmem_columns"] > 0 and isa.problems(facts) == []


def test_planted_blackwell_regressions_fail_the_check():
    from ceiling.nvidia import gemm_specs

    base = dict(BLOCK_K=64, GROUP_M=8, num_stages=3)
    lost = isa.profile(gemm_specs.compile_spec({**base, "BLOCK_M": 16, "BLOCK_N": 64, "num_warps": 4},
                                               target="sm_100a"), "sm_100a")
    assert lost.extra["hmma"] > 0 and any("no tcgen05" in p for p in isa.problems(lost))
    # warp-specialized on 8 warps: fine on sm_90a, spills on sm_100a (the space's warp-specialized-spills)
    ws = {**base, "BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 4, "num_warps": 8, "WARP_SPECIALIZE": True}
    spills = isa.profile(gemm_specs.compile_spec(ws, target="sm_100a"), "sm_100a")
    assert spills.spill_bytes > 0 and any("spills" in p for p in isa.problems(spills))


def test_cdna4_facts_and_a_planted_spill():
    from ceiling.amd import gemm_specs

    spec = gemm_specs.compile_specs("bfloat16")[0]
    facts = isa.profile(spec, "gfx950")
    assert facts.extra["generation"] == "cdna4" and facts.tensor_core_instructions > 0
    assert sum(facts.extra["mfma"].values()) == facts.tensor_core_instructions and isa.problems(facts) == []
    # a 256 x 128 score tile of triangle attention on 4 waves: past the tile-elements rule, it spills
    from ceiling.triton.triangle_attention_specs import kernel_spec

    big = {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1, "waves_per_eu": 2, "matrix_instr_nonkdim": 16}
    spilled = isa.profile(kernel_spec("fwd", big, "bfloat16", 32, target="gfx950", prefix="planted", aligned=True), "gfx950")
    assert spilled.spill_bytes > 0 and any("spills" in p for p in isa.problems(spilled))
    assert "fwd.tile-elements" in {c.id for c, _ in spaces.get("triangle_attention", "gfx950").broken({"fwd": big}, {},
                                                                                                 search=True)}


def test_cdna4_fp8_gemm_takes_ocp_operands_to_the_fp8_mfma():
    """CDNA3's FNUZ codes compiled for gfx950 are widened to FP16 MFMA (the planted regression, which
    the check names); the MI355X's configs take OCP codes to v_mfma_*_f8f6f4."""
    from ceiling.amd import gemm_fp8_specs

    ocp = gemm_fp8_specs.compile_specs(target="gfx950")[0]
    config = {k: v for k, v in ocp.config.items() if k != "scales"}
    fnuz = gemm_fp8_specs.compile_spec({**config, "SCALES": "tensor/tensor"}, "tensor", "tensor",
                                       "float8_e4m3fnuz", target="gfx950")
    good, widened = isa.profile(ocp, "gfx950"), isa.profile(fnuz, "gfx950")
    assert ocp.signature["a_ptr"] == "*fp8e4nv" and isa.problems(good, fp8=True) == []
    assert any("f8f6f4" in k for k in good.extra["mfma"])
    assert any("no FP8 matrix instruction" in p for p in isa.problems(widened, fp8=True))


def test_cdna4_fp8_gemm_interpreted_with_ocp_operands(monkeypatch):
    """On a (faked) MI355X the FP8 GEMM resolves gfx950 and hands its OCP operands to the kernel
    unconverted; interpreted, it matches the reference."""
    import torch

    import ceiling
    from ceiling.scaled_gemm import spec
    from ceiling.testing.numerics import assert_close

    g = torch.Generator().manual_seed(3)
    a = torch.randn(32, 256, generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(64, 256, generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5), torch.tensor(0.25)
    expected = ceiling.scaled_gemm(a, w.mT, sa, sb, backend="reference")
    monkeypatch.setattr(spec, "gpu_facts", lambda framework, device: SHIPPED_GPUS["gfx950"])
    from ceiling.scaled_gemm.op import SCALED_GEMM

    problem = spec.check(a, w.mT, sa, sb)
    assert SCALED_GEMM.select(problem, "amd").forward.config.target == "gfx950"
    got = ceiling.scaled_gemm(a, w.mT, sa, sb, backend="amd")
    exact = (a.double() * 0.5) @ (w.double() * 0.25).mT
    assert_close("cdna4 fp8 gemm", got, expected, exact)


# ------------------------------------------------------------------------------------ CLI


def _cli(*argv):
    import sys

    from ceiling.roofline.cli import main

    old = sys.argv
    sys.argv = ["ceiling", *argv]
    try:
        main()
    except SystemExit as exit_:
        return exit_.code
    finally:
        sys.argv = old
    return 0


# Spills the shipped configs show on a new target, each bounded: the attention dK/dV kernels' (their
# float32 dK and dV accumulators at head dim 128 and 256, on Hopper's tiles)
KNOWN_SPILLS = {("sm_100a", "attn_dkdv_d128_causal_tma"): 8, ("sm_100a", "attn_dkdv_d256_causal_tma"): 8,
                ("sm_100a", "attn_dkdv_d256_bias_tma"): 16}


@pytest.mark.slow
@pytest.mark.parametrize("target", NEW)
@pytest.mark.parametrize("op", ["gemm", "scaled_gemm", "attention", "triangle_attention",
                                "triangle_multiplicative_update", "fp8_quantize"])
def test_every_shipped_config_on_the_new_targets(op, target):
    """The full sweep (``ceiling inspect OP --target T`` for every family): tensor-core instructions
    (tcgen05 on Blackwell), no spills beyond :data:`KNOWN_SPILLS`."""
    rows = isa.inspect_op(op, target)
    assert rows
    for row in rows:
        bound = KNOWN_SPILLS.get((target.replace("sm_103a", "sm_100a"), row["name"]), 0)
        found = isa.problems(row, tensor_cores=op != "fp8_quantize" and "reduce" not in row["name"],
                             fp8=op == "scaled_gemm")
        if bound and row["spill_bytes"] <= bound:
            found = [p for p in found if "spills" not in p]
        assert found == [], found


def test_cli_unknown_target_or_op_is_one_line(capsys):
    assert _cli("inspect", "gemm", "--target", "sm_999") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sm_100a" in err and "gfx950" in err and "Traceback" not in err
    assert _cli("inspect", "nosuch", "--target", "sm_100a") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'gemm'" in err


def test_cli_inspect_json_on_blackwell(capsys):
    config = json.dumps(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=4,
                             EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, SPLIT_K=1, STREAM_K=False))
    assert _cli("inspect", "gemm", "--target", "sm_100a", "--json", "--config", config) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["extra"]["tmem_columns"] == 128 and rows[0]["spill_bytes"] == 0


# ------------------------------------------------------------------------------------ devices


def test_published_figures_of_the_new_devices():
    from ceiling.roofline import ceilings, devices

    for key, target in (("b200", "sm_100a"), ("gb200", "sm_100a"), ("b300", "sm_103a"), ("mi355x", "gfx950")):
        spec = devices.PUBLISHED[key]
        assert spec.target == target and spec.peak("bfloat16") and spec.peak("float8") and spec.peak("float4")
        assert "hbm" in spec.bandwidth and spec.capacity["hbm"] > 0
        for figure in ("peak_flops", "hbm", "units"):
            assert "http" in spec.sources[figure], (key, figure)
    assert devices.match("NVIDIA B200").key == "b200" and devices.match("NVIDIA GB200").key == "gb200"
    assert devices.match("AMD Instinct MI355X").key == "mi355x"
    table = ceilings.fit([], include_published=True)
    assert table["b200"].compute["bfloat16"].source == "published"
    assert table["b200"].compute["bfloat16"].value == 2.25e15


# ------------------------------------------------------------------------------------ AlphaFold pair kernels


def test_patched_pair_stack_runs_the_blackwell_configs(monkeypatch):
    """``ceiling.triangle.patch`` on a Boltz Pairformer layer, with the GPU's facts faked to a B200:
    every triangle call resolves the sm_100a configs, and the kernels at those configs (interpreted
    here) match the unpatched layer, outputs and every parameter gradient."""
    import ceiling.triangle.spec
    from ceiling.op import Op
    from tests.test_triangle_models import check_pair_stack_fp32, pair_inputs, pairformer_layer

    monkeypatch.setattr(ceiling.triangle.spec, "gpu_facts", lambda framework, device: SHIPPED_GPUS["sm_100a"])
    targets = []
    select = Op.select

    def spy(self, problem, backend, config=None, **kw):
        call = select(self, problem, backend, config, **kw)
        if self.name.startswith("triangle"):
            targets.append((self.name, call.forward.config.target))
        return call

    monkeypatch.setattr(Op, "select", spy)
    z, pair_mask = pair_inputs(seed=19)
    check_pair_stack_fp32(pairformer_layer(20), z, pair_mask, "nvidia")
    assert {name for name, _ in targets} == {"triangle_attention", "triangle_multiplicative_update"}
    assert {target for _, target in targets} == {"sm_100a"}


def test_the_gluon_static_check_refuses_other_targets():
    from ceiling.nvidia.gluon import static_check

    with pytest.raises(InputError, match="target: expected sm_90a"):
        static_check.compile_spec(static_check.shipped()[0], "sm_100a")


def _compile_gluon_for(spec, arch: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    names = list(spec.fn.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, kind in spec.signature.items() if kind.startswith("*")}
    src = GluonASTSource(spec.fn, spec.signature, spec.constexprs, attrs)
    return bool(triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4}).asm["cubin"])


@pytest.mark.slow
def test_a_hopper_gluon_compile_for_blackwell_aborts_only_the_child():
    """Why the new targets compile in a forked child: the Gluon (wgmma) attention compiled for
    sm_100a is an LLVM abort, which here ends the child and comes back as an exception."""
    from ceiling.nvidia.gluon import static_check

    spec = static_check.shipped()[0]
    with pytest.raises(isolated.Aborted, match="LLVM ERROR|signal"):
        isolated.call("the Gluon attention for sm_100a", _compile_gluon_for, spec, 100)
