"""The project's contracts (ceiling.verify.project): every entry proved (the split-K reduction's 32-bit
row offset wrapped before it was widened), and each contract matches what its launcher really launches:
the launcher runs under the interpreter with a spy on its launches, and the grid, the integer arguments,
the constexprs and the buffers' dtypes, shapes and strides must fit the contract."""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("z3")
pytest.importorskip("triton")

import ceiling  # noqa: E402
from ceiling.verify import Status, check, project  # noqa: E402

ENTRIES = {f"{e.name}@{e.body['targets'][0]}": e for e in project.ENTRIES}
# A split-K launch of each GEMM backend on the CPU: (backend, launcher module, config, batch).
LAUNCHES = {
    "gemm.splitk_reduce@sm_90a": ("nvidia", "ceiling.nvidia.gemm",
                                  {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_stages": 2,
                                   "num_warps": 4, "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False,
                                   "STREAM_K": False, "SPLIT_K": 2}, 1),
    "gemm.splitk_reduce@gfx942": ("amd", "ceiling.amd.gemm", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16,
                                                              "SPLIT_K": 2}, 2),
}


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_entry_is_proved(key):
    contract = ENTRIES[key].contract()
    combo = next(contract.combinations())
    for r in check.verify(contract, combinations=[combo]):
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


@pytest.mark.parametrize("key", sorted(LAUNCHES))
def test_contract_matches_the_launch(key, monkeypatch):
    entry = ENTRIES[key]
    backend, module_name, config, batch = LAUNCHES[key]
    calls = _spy(importlib.import_module(module_name), monkeypatch)
    gen = torch.Generator().manual_seed(0)
    m, n, k = 37, 45, 96
    a = torch.randn(*([batch] if batch > 1 else []), m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(*([batch] if batch > 1 else []), k, n, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    ceiling.gemm(a, b, bias=bias, activation="gelu", backend=backend, config=config)

    contract = entry.contract()
    launched = [c for c in calls if getattr(c[0], "__name__", getattr(getattr(c[0], "fn", None), "__name__", ""))
                == entry.kernel]
    assert len(launched) == 1, [c[0] for c in calls]
    fn, grid, args, kwargs = launched[0]
    values = dict(zip(contract.fn.arg_names, args), **kwargs)
    env = {name: values[name] for name in list(contract.scalars) + list(contract.constexprs)}
    env.update({name: batch for name in contract.sizes})  # the only size a contract here names is the batch
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
