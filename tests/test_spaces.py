"""The search spaces (kernels/spaces): they load, the shipped tables are points of them, every
bad ``config=`` gets an InputError naming the key, the value and what is allowed before any
launch, on every backend that takes one, and the TPU spaces state the same rules as
kernels/tpu/*_rules.py."""

from __future__ import annotations

import itertools

import pytest
import torch

import ceiling
from ceiling import spaces, tables
from ceiling.errors import InputError
from ceiling.spaces import expressions

FAMILY_TARGETS = [(f, t) for f in spaces.families() for t in spaces.targets(f)]


# --------------------------------------------------------------------------------------- the data


@pytest.mark.parametrize("family,target", FAMILY_TARGETS, ids=[f"{f}-{t}" for f, t in FAMILY_TARGETS])
def test_every_space_loads_and_its_constraints_read_known_names(family, target):
    space = spaces.get(family, target)
    problem = spaces.family(family).problem
    known = set(space.flat()) | set(space.limits) | set(space.context) | set(space.derived) | set(problem["axes"])
    known |= {"dtype_bytes", "out_dtype_bytes", "has_bias", "has_mask", "bias_dtype_bytes", "head_dim", "c_z", "c"}
    for c in space.flat_constraints():
        assert expressions.names(c.expr) <= known, (c.id, expressions.names(c.expr) - known)
        assert c.why, f"{family}/{target} {c.id} says nothing about why"
    for name, p in space.flat().items():
        assert p.search is None or all(p.allows(v) for v in p.search), f"{name}: search values outside the domain"
        assert not p.has_implied or p.allows(p.implied), f"{name}: implied value outside the domain"
    assert space.backend == spaces.target_info(target)["backend"]


def test_device_limits_agree_with_the_tpu_generations_and_the_emulator_targets():
    from ceiling.tpu.generations import GENERATIONS
    from ceiling.trainium.emulator import targets

    for target, gen in GENERATIONS.items():
        limits = spaces.target_limits(target)
        assert (limits["vmem_bytes"], limits["scoped_vmem_default_bytes"], limits["mxu_dim"], limits["tensorcores"]) == (
            gen.vmem_bytes, gen.scoped_vmem_default_bytes, gen.mxu_size, gen.tensorcores)
    for name, t in targets.TARGETS.items():
        limits = spaces.target_limits(name)
        for key in ("partitions", "sbuf_bytes_per_partition", "psum_bank_bytes", "psum_banks", "matmul_contraction_max",
                    "matmul_stationary_free_max", "matmul_moving_free_max"):
            assert limits[key] == getattr(t, key), (name, key)
        assert limits["sbuf_bytes"] == t.sbuf_bytes_per_partition * t.partitions
        assert limits["psum_bytes"] == t.psum_bytes_per_partition * t.partitions


def test_roofline_devices_take_their_limits_from_the_spaces():
    from ceiling.roofline import devices

    for spec in devices.PUBLISHED.values():
        target = spec.target if spec.target != "tpu" else spec.key
        assert spec.limits == spaces.target_limits(target), spec.key


def test_flatten_and_nest_are_inverse():
    config = {"fwd": {"block_m": 64, "num_warps": 4}, "dq": {"block_n": 32}, "use_tma": True}
    flat = spaces.flatten(config, spaces.get("attention", "sm_90a").sections)
    assert flat == {"fwd.block_m": 64, "fwd.num_warps": 4, "dq.block_n": 32, "use_tma": True}
    assert spaces.nest(flat) == config


def test_dotted_names_in_expressions():
    assert expressions.names("fwd.block_m * head_dim <= smem") == {"fwd.block_m", "head_dim", "smem"}
    assert expressions.evaluate("fwd.block_m * 2 + x", {"fwd.block_m": 3, "x": 1}) == 7
    assert expressions.rename("block_m * 2", {"block_m": "fwd.block_m"}) == "fwd.block_m * 2"
    assert expressions.rename("fwd.block_m < 3", {"fwd.block_m": "fwd__block_m"}) == "fwd__block_m < 3"
    with pytest.raises(expressions.ExpressionError):
        expressions.parse("a.b.c < 1")


# ------------------------------------------------------------------------- shipped tables are points


def _gemm_context(shape, dtype):
    size = 4 if dtype == "float32" else 2
    return {"M": shape[0], "N": shape[1], "K": shape[2], "dtype_bytes": size, "out_dtype_bytes": size}


def test_shipped_nvidia_gemm_configs_are_points_of_the_space():
    """Every NVIDIA table entry at its own problem, every autotune candidate, the heuristic's picks."""
    from ceiling import autotune, tables
    from ceiling.gemm.spec import shipped_problem
    from ceiling.nvidia import gemm as G

    space = spaces.get("gemm", "sm_90a")
    for device in ("H100", "H200"):
        for e in tables.read(tables.path("nvidia", device, "gemm"))["entries"]:
            pinned = tables.pinned(e)
            space.check(e["config"], _gemm_context((pinned["M"], pinned["N"], pinned["K"]), pinned["dtype"]))
    for dtype in ("bfloat16", "float16", "float32"):
        for m in (4096, 64):
            for cfg in autotune.candidates("gemm", "sm_90a", shipped_problem(m, 4096, 4096, dtype).features()):
                space.check(cfg, _gemm_context((m, 4096, 4096), dtype))
        for shape in ((16, 4096, 4096), (100, 8192, 8192), (512, 512, 512), (4096, 4096, 4096), (8192, 14336, 4096)):
            space.check(G.heuristic(shipped_problem(*shape, dtype)), _gemm_context(shape, dtype))


def test_shipped_amd_gemm_configs_are_points_of_the_space():
    from ceiling.amd import devices
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    for device in devices.XCDS:
        for dtype in ("bfloat16", "float16", "float32"):
            for m, n, k in ((8, 4096, 4096), (32, 1024, 8192), (64, 64, 64), (1024, 1024, 1024), (8192, 8192, 8192),
                            (512, 16384, 4096), (3000, 1000, 500)):
                problem = shipped_problem(m, n, k, dtype, gpu=f"AMD Instinct {device}", arch="gfx942")
                config = resolve_config(problem, GEMM.implementation("amd"), None)  # checked against the space
                spaces.check("gemm", "gfx942", dict(config), problem.features())


def test_shipped_fp8_gemm_configs_are_points_of_the_space():
    """Every Hopper FP8 sweep candidate, the heuristic's picks on the H200 and off it, and every
    CDNA3 shape class on every scaling it serves, as the op resolves them (checked against the
    space at the problem inside; the tables' entries: tests/test_tables.py)."""
    from ceiling.nvidia.gemm_fp8_specs import problem
    from ceiling.op import get, resolve_config
    from ceiling.tuning import gemm_fp8 as sweep

    space = spaces.get("gemm_fp8", "sm_90a")
    for cfg in sweep.candidates():
        space.check(cfg, {"dtype_bytes": 1, "out_dtype_bytes": 4, "SCALES": "tensor/tensor"})
    scalings = (("tensor", "tensor"), ("row", "row"), ("1x128", "128x128"), ("tensor", "128x128"))
    op = get("scaled_gemm")
    for shape in ((1, 4096, 4096), (64, 14336, 4096), (1024, 1024, 4096), (8192, 8192, 8192)):
        for kinds in scalings:
            for gpu in ({}, None):  # the heuristic off a GPU, the H200's table on it
                resolve_config(problem(*shape, *kinds, out_dtype="float32", gpu=gpu), op.implementation("nvidia"),
                               None)
    for gpu in ("AMD Instinct MI300X", "AMD Instinct MI325X", "AMD Instinct MI300A", None):
        for m in (1, 64, 65, 8192):
            for kinds in scalings:
                p = problem(m, 4096, 4096, *kinds, "float8_e4m3fnuz", "float8_e4m3fnuz",
                            gpu={"gpu": gpu, "arch": "gfx942"} if gpu else {})
                resolve_config(p, op.implementation("amd"), None)


@pytest.mark.parametrize("family", ["triangle_attention", "triangle_multiplication"])
def test_shipped_triangle_configs_are_points_of_the_space(family):
    """Every config the Triton tables give, on every device that has one and on none, every dtype
    and (attention) head-dim bucket, resolved as a launch resolves it: checked whole against the
    space."""
    import dataclasses

    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import SHIPPED_GPUS, shipped_attention_problem, shipped_trimul_problem

    op = get("triangle_attention" if family == "triangle_attention" else "triangle_multiplicative_update")
    for vendor in ("nvidia", "amd"):
        impl = op.implementation(vendor)
        devices = [None, *(d for d in tables.devices(vendor) if tables.path(vendor, d, family).exists()
                           and d != impl.target)]
        for device in devices:
            for dtype in ("bfloat16", "float16", "float32"):
                problems = ([shipped_attention_problem(d, dtype) for d in (16, 32, 64, 128, 256)]
                            if family == "triangle_attention" else [shipped_trimul_problem(dtype)])
                for problem in problems:
                    gpu = dataclasses.replace(problem, gpu=device, arch=SHIPPED_GPUS[impl.target][1] if device else None)
                    resolve_config(gpu, impl, None)  # checked against the space inside


def _attention_problem(head_dim: int, *, causal: bool, biased: bool, gpu: dict, framework: str = "torch"):
    import dataclasses

    from ceiling.attention.spec import shipped_problem

    problem = shipped_problem(head_dim, "bfloat16", causal=causal, biased=biased, **gpu)
    return problem if framework == "torch" else dataclasses.replace(problem, framework="jax", device="gpu:0")


def test_resolved_attention_configs_are_points_of_the_space():
    """What the Triton implementations resolve at every head dim, on their GPU (its tables' entries
    merged: causal or not, with a bias and mask tile or not, from PyTorch through TMA or from JAX
    through pointer loads) and on the CPU (the heuristic): each a point of the space at the
    problem, which ``resolve_config`` checks (a table entry alone is checked by tests/test_tables.py)."""
    from ceiling.amd.attention_specs import MI300X
    from ceiling.attention.op import ATTENTION
    from ceiling.nvidia.attention_specs import H200
    from ceiling.op import resolve_config

    for backend, gpu in (("nvidia", H200), ("amd", MI300X)):
        impl = ATTENTION.implementation(backend)
        for head_dim in (16, 32, 64, 80, 128, 256):
            for causal, biased, framework, device in itertools.product(
                    (False, True), (False, True), ("torch", "jax"), (gpu, {})):
                problem = _attention_problem(head_dim, causal=causal, biased=biased, gpu=device, framework=framework)
                assert resolve_config(problem, impl, None).family == "attention"


def test_shipped_gluon_attention_configs_are_points_of_the_gluon_space():
    """Every kernel of the Gluon table at its head dim, resolved as a launch resolves it (16-bit
    inputs); and the config that asks for them, tiles included, is an attention config."""
    from ceiling.attention.op import ATTENTION
    from ceiling.nvidia.attention_specs import H200
    from ceiling.nvidia.gluon import attention as gluon
    from ceiling.op import resolve_config

    for head_dim, entry in gluon.shipped().items():
        resolved = resolve_config(_attention_problem(head_dim, causal=True, biased=False, gpu=H200),
                                  ATTENTION.implementation("nvidia", "gluon"), None)
        for kernel in entry:
            assert resolved[kernel] == entry[kernel]
        spaces.check("attention", "sm_90a", {"implementation": "gluon", "deterministic": False, "gluon": entry},
                     partial=True)


def test_shipped_tpu_and_trainium_configs_are_points_of_the_space():
    from ceiling.tpu import attention as tpu_attention
    from ceiling.tpu import gemm_export as tpu_gemm_export
    from ceiling.trainium import attention as trn_attention
    from ceiling.trainium import gemm as trn_gemm

    for target in ("tpu-v5e", "tpu-v5p", "tpu-v6e"):
        for dtype in ("bfloat16", "float32"):
            size = 4 if dtype == "float32" else 2
            for entry in tpu_gemm_export.shipped(target, dtype):
                spaces.check("gemm", target, entry["config"], {"dtype_bytes": size, "out_dtype_bytes": size})
    for target in tpu_attention.TARGETS:  # each entry, at each kernel dtype and padded head dim it holds for
        for entry in tpu_attention.shipped_entries(target):
            for dtype, head_dim in itertools.product(("bfloat16", "float32"), (128, 256)):
                if tables.matches(entry, {"kernel_dtype": dtype, "head_dim_pad": head_dim}):
                    spaces.check("attention", target, entry["config"],
                                 {"dtype_bytes": 4 if dtype == "float32" else 2, "head_dim": head_dim})
    for target in ("tpu-v5e", "tpu-v5p", "tpu-v6e"):
        for dtype in ("bfloat16", "float32"):
            config = tables.lookup("tpu", "triangle_multiplication", None, target, {"kernel_dtype": dtype}).config
            spaces.check("triangle_multiplication", target, config, {"dtype_bytes": 4 if dtype == "float32" else 2})
    for target in ("trn1", "trn2"):
        for config in trn_gemm.configs(target):
            spaces.check("gemm", target, config)
        for config in trn_attention.configs(target):
            spaces.check("attention", target, {k: v for k, v in config.items() if k != "head_dim"})


# ------------------------------------------------------------------------------ bad configs, planted


@pytest.fixture
def no_launch(monkeypatch):
    """Every Triton launcher of the kernels fails the test if reached: errors must come first."""
    import ceiling.amd.gemm
    import ceiling.amd.gemm_fp8
    import ceiling.nvidia.gemm
    import ceiling.nvidia.gemm_fp8
    import ceiling.triton.attention
    import ceiling.triton.triangle_attention
    import ceiling.triton.triangle_multiplication

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel launched before the config was checked")

    for module in (ceiling.nvidia.gemm, ceiling.amd.gemm, ceiling.nvidia.gemm_fp8, ceiling.amd.gemm_fp8,
                   ceiling.triton.attention, ceiling.triton.triangle_attention, ceiling.triton.triangle_multiplication):
        monkeypatch.setattr(module, "launcher", refuse)


def _says(err: InputError, *parts: str) -> None:
    text = str(err)
    assert err.argument == "config", text
    for part in parts:
        assert part in text, f"{part!r} not in {text!r}"


GEMM_BAD = [
    # (backend, config, what the message must name: key, value, what is allowed)
    ("nvidia", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 0}, ("SPLIT_K", "0", "an integer >= 1")),
    ("nvidia", {"BLOCK_M": 7}, ("BLOCK_M", "7", "[16, 32, 64, 128, 256]")),
    ("nvidia", {"BLOCK_M": "x", "BLOCK_N": 64, "BLOCK_K": 32}, ("BLOCK_M", "'x'", "one of [16, 32, 64, 128, 256]")),
    ("nvidia", {"BLOCK_M": 64.0}, ("BLOCK_M", "64.0", "one of")),
    ("nvidia", {"BLOCK_M": 64, "SPLITK": 2}, ("SPLITK", "unknown keys", "SPLIT_K")),
    ("nvidia", {"EPILOGUE_SUBTILE": 1}, ("EPILOGUE_SUBTILE", "1", "[False, True]")),
    ("nvidia", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5},
     ("shared-memory", "BLOCK_K=128", "> smem_per_block = 232448")),
    ("amd", {"BLOCK_N": 48}, ("BLOCK_N", "48", "one of [16")),
    ("amd", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 3}, ("lds", "> smem_per_block = 65536")),
    ("amd", {"waves_per_eu": 9}, ("waves_per_eu", "9", "an integer in [0, 8]")),
    ("amd", {"kpack": 3}, ("kpack", "3", "[1, 2]")),
    ("trainium", {"TILES_IN_BLOCK_M": "x"}, ("TILES_IN_BLOCK_M", "'x'", "an integer >= 1")),
    ("trainium", {"target": "trn3"}, ("target", "'trn3'", "['trn1', 'trn2']")),
]


@pytest.mark.parametrize("backend,config,parts", GEMM_BAD, ids=[f"{b}-{i}" for i, (b, _, _) in enumerate(GEMM_BAD)])
def test_bad_gemm_config_is_an_input_error_naming_it(backend, config, parts, no_launch):
    a, b = torch.randn(40, 24, dtype=torch.bfloat16), torch.randn(24, 16, dtype=torch.bfloat16)
    with pytest.raises(InputError) as err:
        ceiling.gemm(a, b, backend=backend, config=config)
    _says(err.value, *parts)


FP8_BAD = [
    # on a 1x128 / 128x128 scaled problem with a bf16 output
    ("nvidia", {"BLOCK_K": 256}, ("BLOCK_K", "256", "one of [32, 64, 128]")),
    ("nvidia", {"PROMOTE_STEPS": -1}, ("PROMOTE_STEPS", "-1", "an integer >= 0")),
    ("nvidia", {"STREAM_K": 1}, ("STREAM_K", "1", "[False, True]")),
    ("nvidia", {"TILE": 1}, ("TILE", "unknown keys", "PROMOTE_STEPS")),
    ("nvidia", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 4},
     ("shared-memory", "BLOCK_M=256", "> smem_per_block = 232448")),
    ("nvidia", {"PROMOTE_STEPS": 0}, ("block-scale-promotion", "PROMOTE_STEPS=0", "SCALES='1x128/128x128'")),
    ("nvidia", {"SCALES": "row/row"}, ("SCALES", "'row/row'", "the call's scaling '1x128/128x128'")),
    ("amd", {"kpack": 3}, ("kpack", "3", "[1, 2]")),
    ("amd", {"waves_per_eu": 9}, ("waves_per_eu", "9", "an integer in [0, 8]")),
    ("amd", {"BLOCK_M": 512, "BLOCK_N": 256, "BLOCK_K": 128}, ("lds", "> smem_per_block = 65536")),
    ("amd", {"PROMOTE_STEPS": 0}, ("block-scale-promotion", "PROMOTE_STEPS=0")),
]


@pytest.mark.parametrize("backend,config,parts", FP8_BAD, ids=[f"{b}-{i}" for i, (b, _, _) in enumerate(FP8_BAD)])
def test_bad_fp8_gemm_config_is_an_input_error_naming_it(backend, config, parts, no_launch):
    from ceiling import fp8

    g = torch.Generator().manual_seed(0)
    aq, a_s = fp8.quantize(torch.randn(40, 200, generator=g), "1x128")
    wq, w_s = fp8.quantize(torch.randn(16, 200, generator=g), "128x128")
    with pytest.raises(InputError) as err:
        ceiling.scaled_gemm(aq, wq.mT, a_s, w_s.mT, backend=backend, config=config)
    _says(err.value, *parts)


@pytest.mark.parametrize("backend", ["nvidia", "amd"])
def test_a_bad_fp8_gemm_config_is_named_before_the_quantizers_launch(backend, no_launch, monkeypatch):
    import ceiling.triton.fp8_quantize

    monkeypatch.setattr(ceiling.triton.fp8_quantize, "launcher", lambda *a, **k: pytest.fail("quantizer launched"))
    x, w = torch.randn(40, 200), torch.randn(200, 16)
    with pytest.raises(InputError) as err:
        ceiling.fp8_gemm(x, w, recipe="block", backend=backend, config={"PROMOTE_STEPS": 0})
    _says(err.value, "block-scale-promotion", "PROMOTE_STEPS=0", "SCALES='1x128/128x128'")


def test_a_partial_fp8_gemm_config_overrides_the_table_entry():
    from ceiling.nvidia.gemm_fp8_specs import problem
    from ceiling.op import get, resolve_config

    op = get("scaled_gemm")
    p = problem(300, 200, 100, "1x128", "128x128", gpu={})
    base = resolve_config(p, op.implementation("nvidia"), None).as_dict()
    cfg = resolve_config(p, op.implementation("nvidia"), {"BLOCK_N": 64, "SCALES": "1x128/128x128"}).as_dict()
    assert cfg == {**base, "BLOCK_N": 64, "SCALES": "1x128/128x128"}
    p = problem(300, 200, 100, "1x128", "128x128", "float8_e4m3fnuz", "float8_e4m3fnuz",
                gpu={"gpu": "AMD Instinct MI300X", "arch": "gfx942"})
    table = resolve_config(p, op.implementation("amd"), None).as_dict()
    assert resolve_config(p, op.implementation("amd"), {"BLOCK_K": 64}).as_dict() == {**table, "BLOCK_K": 64}


def test_bad_tpu_configs_are_input_errors_naming_them():
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.ones((40, 24), jnp.bfloat16)
    for config, parts in (({"bm": 16, "bn": 128, "bk": 128, "foo": 1}, ("unknown ['foo']", "bm, bn, bk")),
                          ({"bm": "x", "bn": 128, "bk": 128}, ("bm='x'", "positive integer")),
                          ({"bm": 16, "bn": 100, "bk": 128}, ("bn=100", "multiples of 128")),
                          ({"bm": 8, "bn": 128, "bk": 128}, ("bm=8", "multiple of 16")),
                          ("autotune", ("'autotune'", "a dict"))):
        with pytest.raises(InputError) as err:
            ceiling.gemm(a, a.T, backend="tpu", config=config)
        _says(err.value, *parts)


def test_a_partial_triangle_config_overrides_the_table_entry_kernel_by_kernel():
    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import shipped_attention_problem, shipped_trimul_problem

    attention = get("triangle_attention").implementation("nvidia")
    problem = shipped_attention_problem(32, "bfloat16", target="sm_90a")  # on an H200
    table = resolve_config(problem, attention, None)
    cfg = resolve_config(problem, attention, {"fwd": {"BLOCK_N": 64}})
    assert cfg["fwd"] == {**table["fwd"], "BLOCK_N": 64} and cfg["bwd_dq"] == table["bwd_dq"]
    trimul = get("triangle_multiplicative_update").implementation("nvidia")
    problem = shipped_trimul_problem("float32")  # on the CPU
    table = resolve_config(problem, trimul, None)
    cfg = resolve_config(problem, trimul, {"bwd_rows": 16, "contract": {"num_stages": 2}})
    assert cfg["bwd_rows"] == 16 and cfg["contract"] == {**table["contract"], "num_stages": 2}


def test_a_partial_gemm_config_overrides_the_table_entry():
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    problem, impl = shipped_problem(300, 200, 100), GEMM.implementation("nvidia")
    base = resolve_config(problem, impl, None)
    cfg = resolve_config(problem, impl, {"BLOCK_M": 64})
    assert cfg["BLOCK_M"] == 64 and {k: v for k, v in cfg.items() if k != "BLOCK_M"} == {
        k: v for k, v in base.items() if k != "BLOCK_M"}
    a, b = torch.randn(70, 40, dtype=torch.bfloat16), torch.randn(40, 50, dtype=torch.bfloat16)
    out = ceiling.gemm(a, b, backend="nvidia", config={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4})
    ref = a.double() @ b.double()
    assert (out.double() - ref).abs().max() <= 2 * ((a @ b).double() - ref).abs().max() + 1e-2


ATTENTION_BAD = [
    ("nvidia", {"fwd": {"block_m": 48}}, ("fwd.block_m", "48", "one of [16, 32, 64, 128, 256]")),
    ("nvidia", {"fwd": {"blockm": 64}}, ("fwd.blockm", "unknown keys", "block_m")),
    ("nvidia", {"fwd": 64}, ("fwd", "64", "a dict")),
    ("nvidia", {"dkdv": {"dq_atomic": "yes"}}, ("dkdv.dq_atomic", "'yes'", "[False, True]")),
    ("nvidia", {"fwd": {"block_m": 256, "block_n": 256, "num_stages": 4}},
     ("fwd.shared-memory", "fwd.block_m=256", "> smem_per_block = 232448", "head_dim_pad=128")),
    ("nvidia", {"tiles": 3}, ("tiles", "unknown keys", "fwd")),
    ("nvidia", {"implementation": "cuda"}, ("implementation", "'cuda'", "['triton', 'gluon']")),
    ("nvidia", {"implementation": "gluon", "gluon": {"fwd": {"block_n": 96}}},
     ("gluon.fwd.block_n", "96", "[64, 128]")),
    ("nvidia", {"implementation": "gluon", "gluon": {"bwd": {"blockm": 64}}}, ("gluon.bwd.blockm", "unknown keys")),
    ("nvidia", {"implementation": "gluon", "deterministic": 1}, ("deterministic", "1", "[False, True]")),
    ("nvidia", "x", ("a dict",)),
    ("amd", {"use_tma": True}, ("use_tma", "True", "[False]")),
    ("amd", {"dq": {"waves_per_eu": -1}}, ("dq.waves_per_eu", "-1", "an integer in [0, 8]")),
    ("tpu", {"block_q": 16, "block_k": 96}, ("block_k=96", "multiples of 128")),
    ("trainium", {"fwd_block_k": 100}, ("fwd_block_k", "100", "a multiple of 128")),
]


@pytest.mark.parametrize("backend,config,parts", ATTENTION_BAD,
                         ids=[f"{b}-{i}" for i, (b, _, _) in enumerate(ATTENTION_BAD)])
def test_bad_attention_config_is_an_input_error_naming_it(backend, config, parts, no_launch):
    q = torch.randn(1, 16, 2, 128, dtype=torch.bfloat16)
    if backend == "tpu":
        jnp = pytest.importorskip("jax.numpy")
        q = jnp.asarray(q.float().numpy()).astype(jnp.bfloat16)
    with pytest.raises(InputError) as err:
        ceiling.attention(q, q, q, backend=backend, config=config)
    _says(err.value, *parts)


TRIANGLE_BAD = [
    ("nvidia", "attention", {"fwd": {"BLOCK_M": 48}}, ("fwd.BLOCK_M", "48", "one of [16")),
    ("nvidia", "attention", {"fwd_rows": {"ROWS": 3}}, ("fwd_rows.ROWS", "3", "[2, 4, 8]")),
    ("amd", "attention", {"bwd_dq": {"waves_per_eu": "2"}}, ("bwd_dq.waves_per_eu", "'2'", "an integer in [0, 8]")),
    ("nvidia", "trimul", {"bwd_rows": 0}, ("bwd_rows", "0", "an integer >= 1")),
    ("nvidia", "trimul", {"contract": {"BLOCK_K": 24}}, ("contract.BLOCK_K", "24", "one of [16")),
    ("amd", "trimul", {"contract": {"BLOCKK": 32}}, ("contract.BLOCKK", "unknown keys", "BLOCK_K")),
    ("trainium", "trimul", {"target": "trn2", "tiles": 1}, ("tiles", "unknown keys", "target")),
    ("tpu", "attention", {"block_q": 16, "block_k": 96}, ("block_k=96", "multiples of 128")),
    ("trainium", "attention", {"bwd_block_k": "256"}, ("bwd_block_k", "'256'", "a multiple of 128")),
    ("tpu", "trimul", {"block_rows": 96}, ("block_rows=96", "multiples of 128")),
]


@pytest.mark.parametrize("backend,op,config,parts", TRIANGLE_BAD,
                         ids=[f"{b}-{o}-{i}" for i, (b, o, _, _) in enumerate(TRIANGLE_BAD)])
def test_bad_triangle_config_is_an_input_error_naming_it(backend, op, config, parts, no_launch):
    if op == "attention":
        q = torch.randn(1, 8, 2, 8, 32)
        bias = torch.randn(1, 1, 2, 8, 8)
        with pytest.raises(InputError) as err:
            ceiling.triangle_attention(q, q, q, bias, backend=backend, config=config)
    else:
        x = torch.randn(1, 8, 8, 16)
        weights = {"p_in_weight": torch.randn(32, 16), "g_in_weight": torch.randn(32, 16),
                   "p_out_weight": torch.randn(16, 16), "g_out_weight": torch.randn(16, 16)}
        with pytest.raises(InputError) as err:
            ceiling.triangle_multiplicative_update(x, "outgoing", None, **weights, backend=backend, config=config)
    _says(err.value, *parts)


# --------------------------------------------------------------------- the TPU spaces and the rules


def _agree(check_space, check_rules, point) -> None:
    try:
        check_rules()
        rules_ok = True
    except InputError:
        rules_ok = False
    try:
        check_space()
        space_ok = True
    except InputError:
        space_ok = False
    assert space_ok == rules_ok, (point, "space" if space_ok else "rules", "accepts it")


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v5p", "tpu-v6e"])
def test_tpu_spaces_state_the_rules(target):
    from ceiling.tpu import attention_rules, gemm_rules, trimul_rules

    sizes = {"bfloat16": 2, "float32": 4}
    gemm = spaces.get("gemm", target)
    for bm, bn, bk, dtype, out in itertools.product((0, 8, 12, 16, 24, 512, 2048), (100, 128, 1024, 4096),
                                                    (128, 200, 2048), sizes, sizes):
        config = {"bm": bm, "bn": bn, "bk": bk}
        _agree(lambda: gemm.check(config, {"dtype_bytes": sizes[dtype], "out_dtype_bytes": sizes[out]}),
               lambda: gemm_rules.check_config(config, dtype, out, target), (config, dtype, out))
    attention = spaces.get("attention", target)
    for bq, bk, bqb, dtype, bias, mask, d in itertools.product((8, 16, 48, 1024, 4096), (96, 128, 2048), (None, 8, 512),
                                                               sizes, (None, "bfloat16", "float32"), (False, True),
                                                               (64, 256)):
        config = {"block_q": bq, "block_k": bk, **({"block_q_bwd": bqb} if bqb else {})}
        context = {"dtype_bytes": sizes[dtype], "head_dim": d, "has_bias": int(bias is not None),
                   "bias_dtype_bytes": sizes[bias] if bias else 4, "has_mask": int(mask)}
        _agree(lambda: attention.check(config, context),
               lambda: attention_rules.check_config(config, dtype, -(-d // 128) * 128, target, bias, mask),
               (config, context))
    trimul = spaces.get("triangle_multiplication", target)
    for rows, bwd, dtype, width in itertools.product((0, 96, 128, 384, 1024, 8192, 65536), (None, 256, 512, 4096), sizes,
                                                     (64, 128, 256)):
        config = {"block_rows": rows, **({"block_rows_bwd": bwd} if bwd else {})}
        _agree(lambda: trimul.check(config, {"dtype_bytes": sizes[dtype], "c_z": width, "c": width}),
               lambda: trimul_rules.check_config(config, dtype, width, width, target), (config, dtype, width))
