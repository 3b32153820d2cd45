"""The search spaces (kernels/spaces): they load, the shipped tables are points of them, every
bad ``config=`` gets an InputError naming the key, the value and what is allowed before any
launch, on every backend that takes one, and the TPU spaces state the same rules as
kernels/tpu/*_rules.py."""

from __future__ import annotations

import itertools

import pytest
import torch

import kernels
from kernels import spaces
from kernels.errors import InputError
from kernels.spaces import expressions

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
    from kernels.tpu.generations import GENERATIONS
    from kernels.trainium.emulator import targets

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
    from roofline import devices

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
    from kernels.nvidia import gemm as G
    from kernels.tuning import autotune

    space = spaces.get("gemm", "sm_90a")
    table = G._config_table()
    for entries in table["devices"].values():
        for e in entries:
            space.check(e["config"], _gemm_context(e["shape"], e["dtype"]))
    for dtype in ("bfloat16", "float16", "float32"):
        for cfg in autotune.candidates(dtype):
            space.check(cfg.as_dict(), _gemm_context((4096, 4096, 4096), dtype))
        for shape in ((16, 4096, 4096), (100, 8192, 8192), (512, 512, 512), (4096, 4096, 4096), (8192, 14336, 4096)):
            space.check(G.heuristic_config(*shape, dtype).as_dict(), _gemm_context(shape, dtype))


def test_shipped_amd_gemm_configs_are_points_of_the_space():
    from kernels.amd import gemm as G
    from kernels.gemm.spec import GemmProblem

    for device in G._table()["devices"]:
        for dtype in ("bfloat16", "float16", "float32"):
            for m, n, k in ((8, 4096, 4096), (32, 1024, 8192), (64, 64, 64), (1024, 1024, 1024), (8192, 8192, 8192),
                            (512, 16384, 4096), (3000, 1000, 500)):
                problem = GemmProblem("torch", None, m, n, k, dtype, dtype, None, None, "cpu", False)
                G.select_config(problem, device)  # checked against the space inside


def test_shipped_fp8_gemm_configs_are_points_of_the_space():
    """Every Hopper FP8 table entry and candidate (for its scaling and shape), the heuristic's picks
    and every CDNA3 shape class on every scaling it serves."""
    from kernels.amd import gemm_fp8 as amd
    from kernels.nvidia import gemm_fp8 as nvidia
    from kernels.scaled_gemm.spec import config_context
    from kernels.tuning import gemm_fp8 as sweep

    space = spaces.get("gemm_fp8", "sm_90a")
    for entries in nvidia._config_table()["devices"].values():
        for e in entries:
            space.check(e["config"], config_context(*e["shape"], *e["scales"].split("/"), "bfloat16"))
    for cfg in sweep.candidates():
        space.check(cfg.as_dict(), config_context(4096, 4096, 4096, "tensor", "tensor", "float32"))
    scalings = (("tensor", "tensor"), ("row", "row"), ("1x128", "128x128"), ("tensor", "128x128"))
    for shape in ((1, 4096, 4096), (64, 14336, 4096), (1024, 1024, 4096), (8192, 8192, 8192)):
        for kinds in scalings:
            space.check(nvidia.heuristic_config(*shape, *kinds).as_dict(),
                        config_context(*shape, *kinds, "float32"))
    for device in amd._table()["devices"]:
        for m in (1, 64, 65, 8192):
            for kinds in scalings:
                amd.select_config(m, 4096, 4096, *kinds, device)  # checked against the gfx942 space inside


@pytest.mark.parametrize("family", ["triangle_attention", "triangle_multiplication"])
def test_shipped_triangle_configs_are_points_of_the_space(family):
    import importlib

    for vendor in ("nvidia", "amd"):
        module = importlib.import_module(f"kernels.{vendor}.{family}")
        table = module._triton._table(str(module.CONFIG_FILE))
        for device in [k for k in table if not k.startswith("_")]:
            name = None if device == "default" else device
            for dtype in ("bfloat16", "float16", "float32"):
                if family == "triangle_attention":
                    for head_dim in (16, 32, 64, 128, 256):
                        module.resolve_config(name, head_dim, dtype, None)
                else:
                    module.resolve_config(name, dtype, None)


def test_shipped_attention_configs_are_points_of_the_space():
    from kernels.amd import attention as amd
    from kernels.nvidia import attention as nvidia

    for pad in (16, 32, 64, 80, 128, 256):
        for narrow, pointer_bias, causal in itertools.product((False, True), repeat=3):
            nvidia.select_config(pad, "sm90", None, narrow, pointer_bias, causal)
            nvidia.select_config(pad, "interpreter", None, narrow, pointer_bias, causal)
        for biased in (False, True):
            amd.select_config(pad, "gfx942", None, biased)


def test_shipped_gluon_attention_configs_are_points_of_the_gluon_space():
    """Every kernel of the Gluon table at its head dim, resolved as a launch resolves it (16-bit
    inputs); and the config that asks for them, tiles included, is an attention config."""
    from kernels.nvidia.gluon import attention as gluon
    from kernels.nvidia.gluon import static_check

    for head_dim, entry in static_check.table()["sm90"].items():
        for kernel in entry:
            assert gluon.tiles(int(head_dim), kernel, None, 2) == entry[kernel]
        spaces.check("attention", "sm_90a", {"implementation": "gluon", "deterministic": False, "gluon": entry},
                     partial=True)


def test_shipped_tpu_and_trainium_configs_are_points_of_the_space():
    from kernels.tpu import attention as tpu_attention
    from kernels.tpu import gemm as tpu_gemm
    from kernels.tpu import triangle_multiplication as tpu_trimul
    from kernels.trainium import attention as trn_attention
    from kernels.trainium import gemm as trn_gemm

    for target, by_dtype in tpu_gemm.load_configs().items():
        if not target.startswith("tpu"):
            continue
        for dtype, table in by_dtype.items():
            size = 4 if dtype == "float32" else 2
            for entry in [table["fallback"], *table["entries"]]:
                spaces.check("gemm", target, {k: entry[k] for k in ("bm", "bn", "bk")},
                             {"dtype_bytes": size, "out_dtype_bytes": size})
    for target, by_dtype in tpu_attention.load_configs().items():
        if not target.startswith("tpu"):
            continue
        for dtype, table in by_dtype.items():
            for head_dim, entry in table.items():
                config = {k: v for k, v in entry.items() if k != "provenance"}
                spaces.check("attention", target, config, {"dtype_bytes": 4 if dtype == "float32" else 2,
                                                           "head_dim": int(head_dim)})
    for target, by_dtype in tpu_trimul.load_configs().items():
        if not target.startswith("tpu"):
            continue
        for dtype, entry in by_dtype.items():
            config = {k: entry[k] for k in ("block_rows", "block_rows_bwd")}
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
    import kernels.amd.gemm
    import kernels.amd.gemm_fp8
    import kernels.nvidia.gemm
    import kernels.nvidia.gemm_fp8
    import kernels.triton.attention
    import kernels.triton.triangle_attention
    import kernels.triton.triangle_multiplication

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel launched before the config was checked")

    for module in (kernels.nvidia.gemm, kernels.amd.gemm, kernels.nvidia.gemm_fp8, kernels.amd.gemm_fp8,
                   kernels.triton.attention, kernels.triton.triangle_attention, kernels.triton.triangle_multiplication):
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
        kernels.gemm(a, b, backend=backend, config=config)
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
    from kernels import fp8

    g = torch.Generator().manual_seed(0)
    aq, a_s = fp8.quantize(torch.randn(40, 200, generator=g), "1x128")
    wq, w_s = fp8.quantize(torch.randn(16, 200, generator=g), "128x128")
    with pytest.raises(InputError) as err:
        kernels.scaled_gemm(aq, wq.mT, a_s, w_s.mT, backend=backend, config=config)
    _says(err.value, *parts)


@pytest.mark.parametrize("backend", ["nvidia", "amd"])
def test_a_bad_fp8_gemm_config_is_named_before_the_quantizers_launch(backend, no_launch, monkeypatch):
    import kernels.triton.fp8_quantize

    monkeypatch.setattr(kernels.triton.fp8_quantize, "launcher", lambda *a, **k: pytest.fail("quantizer launched"))
    x, w = torch.randn(40, 200), torch.randn(200, 16)
    with pytest.raises(InputError) as err:
        kernels.fp8_gemm(x, w, recipe="block", backend=backend, config={"PROMOTE_STEPS": 0})
    _says(err.value, "block-scale-promotion", "PROMOTE_STEPS=0", "SCALES='1x128/128x128'")


def test_a_partial_fp8_gemm_config_overrides_the_table_entry():
    from kernels.amd import gemm_fp8 as amd
    from kernels.nvidia import gemm_fp8 as nvidia

    base, _ = nvidia.select_config(300, 200, 100, "float8_e4m3fn", "1x128", "128x128", None)
    cfg = nvidia.resolve_config(300, 200, 100, "float8_e4m3fn", "1x128", "128x128", None,
                                {"BLOCK_N": 64, "SCALES": "1x128/128x128"})
    assert cfg.as_dict() == {**base.as_dict(), "BLOCK_N": 64}
    table = {k: v for k, v in amd.device_entry("MI300X")["configs"]["blockwise"].items() if k != "SCALES"}
    assert amd.select_config(300, 200, 100, "1x128", "128x128", "MI300X", {"BLOCK_K": 64}) == {**table, "BLOCK_K": 64}


def test_bad_tpu_configs_are_input_errors_naming_them():
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.ones((40, 24), jnp.bfloat16)
    for config, parts in (({"bm": 16, "bn": 128, "bk": 128, "foo": 1}, ("unknown ['foo']", "bm, bn, bk")),
                          ({"bm": "x", "bn": 128, "bk": 128}, ("bm='x'", "positive integer")),
                          ({"bm": 16, "bn": 100, "bk": 128}, ("bn=100", "multiples of 128")),
                          ({"bm": 8, "bn": 128, "bk": 128}, ("bm=8", "multiple of 16")),
                          ("autotune", ("'autotune'", "a dict"))):
        with pytest.raises(InputError) as err:
            kernels.gemm(a, a.T, backend="tpu", config=config)
        _says(err.value, *parts)


def test_a_partial_triangle_config_overrides_the_table_entry_kernel_by_kernel():
    from kernels.nvidia import triangle_attention, triangle_multiplication

    table = triangle_attention.config_for("NVIDIA H200", 32, "bfloat16")
    cfg = triangle_attention.resolve_config("NVIDIA H200", 32, "bfloat16", {"fwd": {"BLOCK_N": 64}})
    assert cfg["fwd"] == {**table["fwd"], "BLOCK_N": 64} and cfg["bwd_dq"] == table["bwd_dq"]
    table = triangle_multiplication.config_for(None, "float32")
    cfg = triangle_multiplication.resolve_config(None, "float32", {"bwd_rows": 16, "contract": {"num_stages": 2}})
    assert cfg["bwd_rows"] == 16 and cfg["contract"] == {**table["contract"], "num_stages": 2}


def test_a_partial_gemm_config_overrides_the_table_entry():
    from kernels.nvidia import gemm as G

    base, _ = G.select_config(300, 200, 100, "bfloat16", None)
    cfg = G.resolve_config(300, 200, 100, "bfloat16", None, {"BLOCK_M": 64})
    assert cfg.BLOCK_M == 64 and {k: v for k, v in cfg.as_dict().items() if k != "BLOCK_M"} == {
        k: v for k, v in base.as_dict().items() if k != "BLOCK_M"}
    a, b = torch.randn(70, 40, dtype=torch.bfloat16), torch.randn(40, 50, dtype=torch.bfloat16)
    out = kernels.gemm(a, b, backend="nvidia", config={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4})
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
        kernels.attention(q, q, q, backend=backend, config=config)
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
            kernels.triangle_attention(q, q, q, bias, backend=backend, config=config)
    else:
        x = torch.randn(1, 8, 8, 16)
        weights = {"p_in_weight": torch.randn(32, 16), "g_in_weight": torch.randn(32, 16),
                   "p_out_weight": torch.randn(16, 16), "g_out_weight": torch.randn(16, 16)}
        with pytest.raises(InputError) as err:
            kernels.triangle_multiplicative_update(x, "outgoing", None, **weights, backend=backend, config=config)
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
    from kernels.tpu import attention_rules, gemm_rules, trimul_rules

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
