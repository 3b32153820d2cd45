"""The project's contracts (ceiling.verify.project): every entry proved except the properties it names as
unknown, and each contract matches what its launcher really launches: the launcher runs under
the interpreter with a spy on its launches (jax-triton's call is recorded instead), and the grid, the
integer arguments, the constexprs and the buffers' dtypes, shapes and strides must fit the contract."""

from __future__ import annotations

import functools
import importlib
import inspect

import pytest
import torch

pytest.importorskip("z3")
pytest.importorskip("triton")

import ceiling  # noqa: E402
from ceiling.verify import Status, check, project  # noqa: E402

ENTRIES = {f"{e.name}@{e.target}": e for e in project.ENTRIES}
BACKEND = {"sm_90a": "nvidia", "gfx942": "amd"}
NVIDIA_SPLIT = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_stages": 2, "num_warps": 4,
                "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "STREAM_K": False, "SPLIT_K": 2}


def _gemm(backend, config, batch):
    def launch():
        gen = torch.Generator().manual_seed(0)
        m, n, k = 37, 45, 96
        lead = [batch] if batch > 1 else []
        a = torch.randn(*lead, m, k, generator=gen).to(torch.bfloat16)
        b = torch.randn(*lead, k, n, generator=gen).to(torch.bfloat16)
        bias = torch.randn(n, generator=gen).to(torch.bfloat16)
        ceiling.gemm(a, b, bias=bias, activation="gelu", backend=backend, config=config)
    return launch


def _quantize(granularity, transpose):
    def launch():
        from ceiling.triton import fp8_quantize

        x = torch.randn(150, 200, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        fp8_quantize.quantize(x, granularity, transpose=transpose)
    return launch


# The configs the trimul entries' constexprs name (the sm_90a table's kernels).
TRIMUL_CONFIG = {"ln_gate_proj": {"BLOCK_M": 64, "BLOCK_N": 64}, "contract": {"BLOCK_M": 128, "BLOCK_N": 128,
                 "BLOCK_K": 32}, "ln_out_gate": {"BLOCK_M": 64, "BLOCK_N": 32},
                 "out_gate_bwd": {"BLOCK_M": 64, "BLOCK_N": 64}, "ln_out_bwd": {"BLOCK_M": 32, "BLOCK_K": 32},
                 "ln_gate_proj_bwd": {"BLOCK_M": 64, "BLOCK_N": 32}}


@functools.cache
def _trimul(direction, backend, backward=False):
    def launch():
        gen = torch.Generator().manual_seed(0)
        n, c_z, c = 5, 128, 96  # 25 pair rows; c_z and c inside the contracts' (64, 128] widths
        x = torch.randn(1, n, n, c_z, generator=gen).to(torch.bfloat16).requires_grad_(backward)
        mask = (torch.rand(1, n, n, generator=gen) > 0.2).to(torch.bfloat16)
        w = lambda *shape: (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(torch.bfloat16)  # noqa: E731
        out = ceiling.triangle_multiplicative_update(x, direction, mask, p_in_weight=w(2 * c, c_z),
                                                     g_in_weight=w(2 * c, c_z), p_out_weight=w(c_z, c),
                                                     g_out_weight=w(c_z, c_z),
                                                     backend=backend, config=TRIMUL_CONFIG)
        if backward:
            out.backward(torch.randn(out.shape, generator=gen).to(out.dtype))
    return launch


def _attention():
    def launch():
        from ceiling.triton import attention

        gen = torch.Generator().manual_seed(0)
        q = torch.randn(2, 70, 4, 64, generator=gen).to(torch.bfloat16)
        k, v = (torch.randn(2, 90, 2, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
        attention.forward(q, k, v, None, None, True, 0.125, {"fwd": {"block_m": 128, "block_n": 64}}, False)
    return launch


def _triangle_attention(backend):
    def launch():
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 9, 2, 9, 64, generator=gen).to(torch.bfloat16) for _ in range(3))
        bias = torch.randn(1, 1, 2, 9, 9, generator=gen).to(torch.bfloat16)
        mask = torch.rand(1, 9, 1, 1, 9, generator=gen) > 0.2
        ceiling.triangle_attention(q, k, v, bias, mask, backend=backend,
                                   config={"fwd": {"BLOCK_M": 128, "BLOCK_N": 64}})
    return launch


@functools.cache
def _attention_bwd(kv_heads):
    def launch():
        from ceiling.triton import attention

        gen = torch.Generator().manual_seed(0)
        q = torch.randn(2, 70, 4, 64, generator=gen).to(torch.bfloat16)
        k, v = (torch.randn(2, 90, kv_heads, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
        cfg = {"fwd": {"block_m": 128, "block_n": 64}, "dkdv": {"block_m": 64, "block_n": 128},
               "dq": {"block_m": 128, "block_n": 64}}
        o, lse = attention.forward(q, k, v, None, None, True, 0.125, cfg, False)
        attention.backward(torch.randn(o.shape, generator=gen).to(o.dtype), q, k, v, o, lse, None, None, True, 0.125,
                           False, cfg, False)
    return launch


@functools.cache
def _triangle_attention_bwd(backend, dq_atomic):
    def launch():
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 9, 2, 9, 64, generator=gen).to(torch.bfloat16).requires_grad_() for _ in range(3))
        bias = torch.randn(1, 1, 2, 9, 9, generator=gen).to(torch.bfloat16).requires_grad_()
        mask = torch.rand(1, 9, 1, 1, 9, generator=gen) > 0.2
        out = ceiling.triangle_attention(q, k, v, bias, mask, backend=backend, config={
            "bwd_dkdv": {"BLOCK_M": 32, "BLOCK_N": 64, "DQ_ATOMIC": dq_atomic}, "bwd_dq": {"BLOCK_M": 64, "BLOCK_N": 32},
            "bwd_dbias": {"BLOCK_M": 32, "BLOCK_N": 32, "ROW_SPLIT": 4}})
        out.backward(torch.randn(out.shape, generator=gen).to(out.dtype))
    return launch


# Each entry's launcher on the CPU: (the module whose launches are watched, the launch, its sizes that are
# not kernel arguments).
LAUNCHES = {
    "gemm.splitk_reduce@sm_90a": ("ceiling.nvidia.gemm", _gemm("nvidia", NVIDIA_SPLIT, 1), {}),
    "gemm.splitk_reduce@gfx942": ("ceiling.amd.gemm", _gemm("amd", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16,
                                                                    "SPLIT_K": 2}, 2), {"B": 2}),
    "gemm.cdna3@gfx942": ("ceiling.amd.gemm", _gemm("amd", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 4,
                                                            "SPLIT_K": 1}, 1), {}),
    **{f"attention.forward.pointer@{t}": ("ceiling.triton.attention", _attention(),
                                          {"B": 2, "SQ": 70, "SK": 90, "H": 4, "HK": 2}) for t in ("sm_90a", "gfx942")},
    **{f"triangle_attention.forward@{t}": ("ceiling.triton.triangle_attention", _triangle_attention(BACKEND[t]),
                                           {"BATCH": 1}) for t in ("sm_90a", "gfx942")},
    **{f"fp8_quantize.{g}{'.transposed' if t else ''}@{target}": ("ceiling.triton.fp8_quantize", _quantize(g, t), {})
       for g, t in (("1x128", False), ("1x128", True), ("128x128", False)) for target in ("sm_90a", "gfx942")},
    **{f"fp8_quantize.{name}@{target}": ("ceiling.triton.fp8_quantize", _quantize(g, False), sizes)
       # 150 x 200 in 64 x 128 tiles: 6 tiles, 3 programs under the interpreter, 4 partials
       for name, g, sizes in (("row", "row", {}), ("tensor.amax", "tensor", {"WIDTH": 4}), ("tensor", "tensor", {}))
       for target in ("sm_90a", "gfx942")},
    **{f"trimul.{kernel}@{target}": ("ceiling.triton.triangle_multiplication", _trimul(direction, BACKEND[target]),
                                       {"BATCH": 1, "N": 5})
       for kernel, direction in (("ln_gate_proj", "outgoing"), ("contract.outgoing", "outgoing"),
                                 ("contract.incoming", "incoming"), ("ln_out_gate", "incoming"))
       for target in ("sm_90a", "gfx942")},
    **{f"trimul.{kernel}@{target}": ("ceiling.triton.triangle_multiplication",
                                       _trimul(direction, BACKEND[target], backward=True),
                                       {"BATCH": 1, "N": 5, "M": 25})
       for kernel, direction in (("out_gate_bwd", "outgoing"), ("ln_out_bwd", "incoming"),
                                 ("ln_gate_proj_bwd", "outgoing"), ("contract_bwd.outgoing.da", "outgoing"),
                                 ("contract_bwd.outgoing.db", "outgoing"), ("contract_bwd.incoming.da", "incoming"),
                                 ("contract_bwd.incoming.db", "incoming"))
       for target in ("sm_90a", "gfx942")},
}

LAUNCHES.update({
    f"attention.{kernel}@{t}": ("ceiling.triton.attention", _attention_bwd(4 if kernel == "bwd_dkdv" else 2),
                                {"B": 2, "SQ": 70, "SK": 90, "H": 4, "HK": 4 if kernel == "bwd_dkdv" else 2})
    for kernel in ("bwd_preprocess", "bwd_dkdv", "bwd_dkdv.gqa", "bwd_dq") for t in ("sm_90a", "gfx942")})
LAUNCHES.update({
    f"triangle_attention.{kernel}@{t}": ("ceiling.triton.triangle_attention",
                                         _triangle_attention_bwd(BACKEND[t], kernel.endswith("dq_atomic")),
                                         {"BATCH": 1, "H": 2} if kernel == "bwd_preprocess" else {"BATCH": 1})
    for kernel in ("bwd_preprocess", "bwd_dkdv", "bwd_dkdv.dq_atomic", "bwd_dq", "bwd_dbias")
    for t in ("sm_90a", "gfx942")})

# Entries whose kernel the watched call launches more than once: (which launch the contract describes, how
# many there are). The backward recomputes the forward's product, then runs da's and db's.
NTH_LAUNCH = {f"trimul.contract_bwd.{d}.{g}@{t}": (2 + (g == "db"), 4) for d in ("outgoing", "incoming")
              for g in ("da", "db") for t in ("sm_90a", "gfx942")}


# Entries whose launcher is jax-triton's (no CPU interpreter there): the call is recorded, not run.
JAX_LAUNCHES = {"gemm.persistent.pointer@sm_90a": False}


def test_every_entry_has_its_launch():
    assert set(LAUNCHES) | set(JAX_LAUNCHES) == set(ENTRIES)


# The fast check: each kernel once (its sm_90a entry, else its only one; first constexpr combination), the
# properties it proves.
PROPERTIES = ("bounds", "overflow", "race", "coverage")
# The CDNA3 GEMM's overflow proof takes about a minute: the slow test holds it (and the wrap it found is
# held by test_cdna3_gemm_widens_offsets_for_its_padded_tiles).
SLOW_PROOFS = {"gemm.cdna3@gfx942"}
REPRESENTATIVES = sorted(k for k, e in ENTRIES.items() if (k.endswith("@sm_90a") or f"{e.name}@sm_90a" not in ENTRIES)
                         and set(PROPERTIES) - set(e.unknown) and k not in SLOW_PROOFS)


@pytest.mark.parametrize("key", REPRESENTATIVES)
def test_entry_is_proved(key):
    entry = ENTRIES[key]
    contract = entry.contract()
    combo = next(contract.combinations())
    for r in check.verify(contract, [p for p in PROPERTIES if p not in entry.unknown],
                          combinations=[combo], timeout_ms=60_000):
        assert r.status is Status.PROVED, r


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_entry_every_combination(key, tmp_path, monkeypatch):
    """Every constexpr combination and property as ``verify --all`` answers it (uncached): the properties the
    entry does not name as unknown are proved, those it names are unknown with a reason."""
    entry = ENTRIES[key]
    monkeypatch.setattr(project, "cache_dir", lambda: tmp_path)
    rs, cached = project.results(entry, use_cache=False)
    assert not cached and len(rs) == len(list(entry.contract().combinations())) * 4
    for r in rs:
        if r.property in entry.unknown:
            assert r.status is Status.UNKNOWN and r.reason, r
        else:
            assert r.status is Status.PROVED, r


def _spy(module, monkeypatch):
    calls = []
    real = module.launcher

    def launcher(fn, *, on_gpu):
        inner = real(fn, on_gpu=on_gpu)

        class Grid:
            def __getitem__(self, grid):
                def run(*args, **kwargs):
                    calls.append((fn, tuple(grid), args, kwargs))
                    return inner[grid](*args, **kwargs)
                return run
        return Grid()

    monkeypatch.setattr(module, "launcher", launcher)
    return calls


_RECORDED: dict = {}


def _launches(module_name, launch):
    """What ``launch`` launches through ``module_name``'s launcher, recorded once per launch function (the
    backward entries share one interpreted backward per direction and backend)."""
    if (module_name, launch) not in _RECORDED:
        patch = pytest.MonkeyPatch()
        try:
            calls = _spy(importlib.import_module(module_name), patch)
            launch()
        finally:
            patch.undo()
        _RECORDED[module_name, launch] = calls
    return _RECORDED[module_name, launch]


@pytest.mark.parametrize("key", sorted(LAUNCHES))
def test_contract_matches_the_launch(key):
    entry = ENTRIES[key]
    module_name, launch, sizes = LAUNCHES[key]
    calls = _launches(module_name, launch)

    contract = entry.contract()
    launched = [c for c in calls if getattr(c[0], "__name__", getattr(getattr(c[0], "fn", None), "__name__", ""))
                == entry.kernel]
    nth, count = NTH_LAUNCH.get(key, (0, 1))
    assert len(launched) == count, [c[0] for c in calls]
    fn, grid, args, kwargs = launched[nth]
    defaults = {n: p.default for n, p in inspect.signature(contract.fn.fn).parameters.items()
                if p.default is not inspect.Parameter.empty}
    values = {**defaults, **dict(zip(contract.fn.arg_names, args)), **kwargs}
    env = {name: values[name] for name in list(contract.scalars) + list(contract.constexprs)}
    env.update(sizes)
    for name, values_allowed in contract.constexprs.items():
        assert env[name] in values_allowed, (name, env[name])
    for name, s in contract.scalars.items():
        if s.expr is not None:
            assert env[name] == s.expr.value(env), name
        else:
            assert s.lo <= env[name] <= s.hi, name
    assert all(c.value(env) for c in contract.assume)
    expected = tuple(g.value(env) for g in contract.grid)
    assert grid + (1,) * (len(expected) - len(grid)) == expected
    for name, buf in contract.buffers.items():
        t = values[name]
        assert str(t.dtype).removeprefix("torch.") == buf.dtype, name
        assert list(t.shape) == [s.value(env) for s in buf.shape], name
        assert list(t.stride()) == [s.value(env) for s in buf.strides], name


@pytest.mark.parametrize("key", sorted(JAX_LAUNCHES))
def test_contract_matches_the_jax_launch(key, monkeypatch):
    """The JAX GEMM's call to jax-triton (arguments, grid, output) against the contract, on contiguous arrays."""
    from types import SimpleNamespace

    jnp = pytest.importorskip("jax.numpy")
    from ceiling import jax_bridge
    from ceiling.nvidia import gemm_jax

    calls = []

    def triton_call(*args, kernel, out_shape, grid, **kwargs):
        calls.append((kernel, grid, args, out_shape, kwargs))
        return jnp.zeros(out_shape.shape, out_shape.dtype)

    monkeypatch.setattr(jax_bridge, "import_jax_triton", lambda: SimpleNamespace(triton_call=triton_call))
    import jax

    monkeypatch.setattr(jax, "devices", lambda: [SimpleNamespace(core_count=132)])  # an H100/H200's SMs
    batched = JAX_LAUNCHES[key]
    batch, m, n, k = (9, 400, 450, 96) if batched else (1, 5000, 450, 96)  # >= 132 tiles: NUM_SMS = 132
    lead = (batch,) if batched else ()
    a, b = jnp.zeros(lead + (m, k), jnp.bfloat16), jnp.zeros(lead + (k, n), jnp.bfloat16)
    problem = SimpleNamespace(out_dtype="bfloat16", out_shape=lead + (m, n), b_shared=False, activation="gelu")
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
              "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "SPLIT_K": 1}
    gemm_jax.forward(problem, config, a, b, jnp.zeros((n,), jnp.bfloat16))

    contract = ENTRIES[key].contract()
    ((kernel, grid, args, out_shape, kwargs),) = calls
    assert kernel is contract.fn
    names = [a for a in contract.fn.arg_names if a not in contract.constexprs]
    outputs = [name for name in names if name in contract.buffers and contract.buffers[name].output]
    values = dict(zip([a for a in names if a not in outputs], args), **dict(zip(outputs, [out_shape])), **kwargs)
    env = {name: values[name] for name in list(contract.scalars) + list(contract.constexprs)}
    for name, allowed in contract.constexprs.items():
        assert env[name] in allowed, (name, env[name])
    for name, sc in contract.scalars.items():
        assert env[name] == sc.expr.value(env) if sc.expr is not None else sc.lo <= env[name] <= sc.hi, name
    assert tuple(grid) == tuple(g.value(env) for g in contract.grid)
    for name, buf in contract.buffers.items():
        t = values[name]  # jax arrays and the output's ShapeDtypeStruct: contiguous by construction
        assert str(t.dtype) == buf.dtype, name
        assert list(t.shape) == [d.value(env) for d in buf.shape], name


# --- the proofs' consumers: import-point, the adapters, the exported certificate ------------------------

def _planted(monkeypatch, cache, **fields):
    """A gemm/gfx942 entry whose kernel has an off-by-one load mask, launched when GROUP_M > 4 (``fields``
    replace the entry's)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("ceiling_verify_planted",
                                                  Path(__file__).parent / "verify_cases" / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "ceiling_verify_planted", module)
    monkeypatch.setattr(project, "cache_dir", lambda: cache)
    entry = project.Entry("planted.copy", "ceiling_verify_planted", "copy_off_by_one", **{
        "family": "gemm", "applies": "GROUP_M > 4", "point_keys": (), **fields, "body": {
            "targets": ["gfx942"], "grid": ["cdiv(n, BLOCK)"], "scalars": {"n": [1, 2**20]},
            "constexprs": {"BLOCK": [128]},
            "buffers": {"x_ptr": {"shape": ["n"], "dtype": "float32"},
                        "y_ptr": {"shape": ["n"], "dtype": "float32", "output": True}}}})
    monkeypatch.setattr(project, "ENTRIES", (entry,))


def test_a_sectioned_entry_reads_its_own_section(tmp_path, monkeypatch):
    """A kernel of a sectioned family (one config section per kernel) is checked when a point sets its
    section, flat ("section.KEY", the adapters' points) or nested (import-point's), with that section's
    values as its constexprs; a point of other sections does not launch it."""
    from ceiling.roofline.templates import adapters, export

    _planted(monkeypatch, tmp_path, family="triangle_multiplication", section="ln_gate_proj", applies="",
             point_keys=("BLOCK",))
    family = "triangle_multiplication"
    for point in ({"ln_gate_proj.BLOCK": 64}, {"ln_gate_proj": {"BLOCK": 64}}):
        (bad, *_) = project.failures(family, "gfx942", point)
        assert bad.status is Status.COUNTEREXAMPLE and bad.constexprs == {"BLOCK": 64}, bad
    assert not project.failures(family, "gfx942", {"contract.BLOCK_M": 64, "bwd_rows": 65536})
    template = export.build(family, "gfx942", [])
    assert not adapters.proved(template, {"ln_gate_proj.BLOCK": 64})
    assert adapters.proved(template, {"contract.BLOCK_M": 64})


def test_a_known_unknown_does_not_refuse_a_point(tmp_path, monkeypatch):
    """A property the entry names as unknown is a known limit (the certificate records it as not proved), not
    a failure; the same unknown where the entry expects a proof is one. The kernel: a copy whose mask reads a
    loaded flag, so its coverage is unknown."""
    _planted(monkeypatch, tmp_path)
    body = {"targets": ["gfx942"], "grid": ["cdiv(n, BLOCK)"], "scalars": {"n": [1, 2**20]},
            "constexprs": {"BLOCK": [128]},
            "buffers": {"x_ptr": {"shape": ["n"], "dtype": "float32"}, "keep_ptr": {"shape": ["n"], "dtype": "int8"},
                        "y_ptr": {"shape": ["n"], "dtype": "float32", "output": True}}}
    for unknown in (("coverage",), ()):
        entry = project.Entry("planted.keyed", "ceiling_verify_planted", "key_masked_copy_ok", body=body,
                              family="gemm", unknown=unknown)
        monkeypatch.setattr(project, "ENTRIES", (entry,))
        (_, rs), = project.check_point("gemm", "gfx942", {"GROUP_M": 8})
        assert {r.property: r.status for r in rs}["coverage"] is Status.UNKNOWN
        failed = [r.property for r in project.failures("gemm", "gfx942", {"GROUP_M": 8})]
        assert failed == ([] if unknown else ["coverage"])


def test_import_point_refuses_a_point_whose_proof_fails(tmp_path, monkeypatch):
    from ceiling.errors import InputError
    from ceiling.roofline.templates import export, importing

    folder = export.export(tmp_path, [], ["gemm"], ["gfx942"])[0]
    _planted(monkeypatch, tmp_path / "cache")
    point = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 2, "num_warps": 4,
             "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}
    with pytest.raises(InputError, match="planted.copy@gfx942: bounds.*counterexample"):
        importing.import_point(folder, {**point, "GROUP_M": 8}, {"M": 512, "N": 1024, "K": 1024}, "test",
                               table=tmp_path / "t.json")
    # a point that does not launch the planted kernel is filed
    importing.import_point(folder, {**point, "GROUP_M": 4}, {"M": 512, "N": 1024, "K": 1024}, "test",
                           table=tmp_path / "t.json")


def test_adapters_offer_only_points_that_hold(tmp_path, monkeypatch):
    from ceiling.roofline.templates import adapters, export

    template = export.build("gemm", "gfx942", [])
    _planted(monkeypatch, tmp_path)
    assert not adapters.proved(template, {"GROUP_M": 8})
    assert adapters.proved(template, {"GROUP_M": 4})
    prune = adapters.early_config_prune(template)

    class Cfg:  # what early_config_prune reads of a triton.Config
        def __init__(self, **kw):
            self.kwargs, self.num_warps, self.num_stages = kw, 4, 2

    base = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}
    kept = prune([Cfg(**base, GROUP_M=8), Cfg(**base, GROUP_M=4)], {"M": 512, "N": 1024, "K": 1024})
    assert [c.kwargs["GROUP_M"] for c in kept] == [4]


def test_exported_template_carries_its_certificate(tmp_path):
    import json

    from ceiling.roofline.templates import export

    folder = export.export(tmp_path, [], ["gemm"], ["gfx942"])[0]
    cert = json.loads((folder / "certificate.json").read_text())
    (kernel,) = cert["kernels"]
    assert kernel["name"] == "gemm.splitk_reduce" and kernel["properties"] == ["bounds", "coverage", "overflow", "race"]
    assert [p["SPLIT_K"] for p in kernel["points_proved"]] == [2, 4] and not kernel["points_not_proved"]
    assert cert["triton"] and cert["z3"] and cert["level"] == "TTIR" and len(kernel["digest"]) == 64


def test_a_certificate_without_proving_reads_the_cache(tmp_path, monkeypatch):
    """``ceiling run``'s templates: the certificate holds the proofs its proofs step cached, and marks a kernel
    with none as not verified instead of proving it."""
    monkeypatch.setattr(project, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(project, "ENTRIES", (ENTRIES["gemm.splitk_reduce@gfx942"],))
    (kernel,) = project.certificate("gemm", "gfx942", prove=False)["kernels"]
    assert kernel["not_verified"] and "points_proved" not in kernel and not list(tmp_path.glob("*.json"))
    project.results(ENTRIES["gemm.splitk_reduce@gfx942"])
    (kernel,) = project.certificate("gemm", "gfx942", prove=False)["kernels"]
    assert [p["SPLIT_K"] for p in kernel["points_proved"]] == [2, 4] and "not_verified" not in kernel


def test_verify_all_cli_and_its_cache(tmp_path, monkeypatch):
    """`ceiling verify --all`: every entry's results, exit 0 when all are proved, the second run from the cache."""
    import json

    from typer.testing import CliRunner

    from ceiling.roofline.cli import app
    from ceiling.verify import launchers

    monkeypatch.setattr(project, "ENTRIES", (ENTRIES["fp8_quantize.1x128@gfx942"],))
    monkeypatch.setattr(project, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(launchers, "verify_all", lambda use_cache=True: iter(()))  # tested in test_verify_tma.py
    first = CliRunner().invoke(app, ["verify", "--all", "--json"])
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in first.output.splitlines()]
    assert [(r["property"], r["status"]) for r in rows] == [(p, "proved") for p in ("bounds", "overflow", "race",
                                                                                    "coverage")]
    assert len(list(tmp_path.glob("*.json"))) == 1
    second = CliRunner().invoke(app, ["verify", "--all"])
    assert second.exit_code == 0 and "[cached]" in second.output.splitlines()[0]
    neither = CliRunner().invoke(app, ["verify"])
    assert neither.exit_code == 2


def test_gemm_pointer_path_computes_the_product():
    """The persistent GEMM's pointer path (64-bit tile offsets since its proof found an i32 wrap), under the
    interpreter: several tiles per program, a ragged edge, bias and gelu against torch."""
    from ceiling.nvidia.gemm_jax import gemm_kernel_jax
    from ceiling.triton_runtime import launcher

    gen = torch.Generator().manual_seed(0)
    m, n, k = 37, 45, 40
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    launcher(gemm_kernel_jax, on_gpu=False)[(3,)](
        a, b, bias, m, n, k, 1, m, m * k, k, 1, k * n, n, 1, m * n, n, c,
        BATCHED=False, HAS_BIAS=True, ACTIVATION="gelu", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2,
        NUM_SMS=3, EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, SPLIT_K=1)
    want = torch.nn.functional.gelu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(c.float(), want, atol=2e-2, rtol=2e-2)


def test_cdna3_gemm_widens_offsets_for_its_padded_tiles():
    """The output's whole tiles decide 32-bit offsets, not the output: at M = 18946, N = 111854 (M * N just
    under 2^31) the last 256-row tile's masked-off rows times N passed 2^31, the verifier's counterexample."""
    from ceiling.amd.gemm import large_offsets

    cfg = {"BLOCK_M": 256, "BLOCK_N": 256}
    m, n, k = 18946, 111854, 2
    a, b, c = (torch.empty(*s, dtype=torch.bfloat16, device="meta") for s in ((m, k), (k, n), (m, n)))
    assert m * n < 2**31 and large_offsets(a, b, c, n, 1, m, n, cfg)
    assert not large_offsets(a, b, c, n, 1, 18944, n, cfg)  # 74 whole tiles: the last row is inside
