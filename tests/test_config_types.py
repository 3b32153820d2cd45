"""config= is checked for type as well as domain on every backend of every op, before anything
launches: a string where the space says integer ("64"), a bool where it says integer (True is
not 1) and an integer where it says bool are refused naming the key; "autotune" stays valid
where it is; the reference, which takes no config, refuses any."""

from __future__ import annotations

import numbers

import pytest
import torch

import ceiling
from ceiling import spaces
from ceiling.errors import InputError
from ceiling.spaces.schema import nest

TARGETS = {"nvidia": "sm_90a", "amd": "gfx942", "tpu": "tpu-v5e", "trainium": "trn2"}
FAMILIES = {"gemm": "gemm", "attention": "attention", "triangle_attention": "triangle_attention",
            "triangle_multiplicative_update": "triangle_multiplication"}


def _call(op: str, backend: str, config):
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(shape, generator=g).to(dtype)

    if op == "gemm":
        return ceiling.gemm(r(32, 32), r(32, 32), backend=backend, config=config)
    if op == "attention":
        dtype = torch.float32 if backend == "reference" else torch.bfloat16
        return ceiling.attention(r(1, 16, 2, 32, dtype=dtype), r(1, 16, 2, 32, dtype=dtype), r(1, 16, 2, 32, dtype=dtype),
                                 backend=backend, config=config)
    if op == "triangle_attention":
        return ceiling.triangle_attention(r(1, 4, 1, 4, 32), r(1, 4, 1, 4, 32), r(1, 4, 1, 4, 32), r(1, 1, 1, 4, 4),
                                          backend=backend, config=config)
    return ceiling.triangle_multiplicative_update(r(1, 4, 4, 16), "outgoing", p_in_weight=r(16, 16), g_in_weight=r(16, 16),
                                                  p_out_weight=r(16, 8), g_out_weight=r(16, 16), backend=backend,
                                                  config=config)


def _typed_key(space, kind):
    """A parameter of ``space`` whose domain is integers (``kind`` "int"), booleans ("bool") or
    strings ("str"), and a value of it: the flat name and the value (None, None without one)."""
    types = {"int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
             "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str)}[kind]
    for name, p in space.flat().items():
        if p.space is not None:
            continue
        values = p.values if p.values is not None else ([p.range[0]] if p.range else [])
        values = [v for v in values if v is not None]
        if values and all(types(v) for v in values):
            return name, values[-1]
    return None, None


def _wrong_types(op, backend):
    """(key, wrong values) for a config of ``op`` on ``backend``: an integer key given a string, a
    bool and a float; where the space has no integer key (Trainium's multiplicative update
    takes only its chip), a string key given an integer and a bool."""
    space = spaces.get(FAMILIES[op], TARGETS[backend])
    name, value = _typed_key(space, "int")
    if name is not None:
        return name, (str(value), True, float(value))
    name, value = _typed_key(space, "str")
    return name, (1, True)


CASES = [(op, backend) for op in FAMILIES for backend in TARGETS]
BOOL_CASES = [(op, backend) for op, backend in CASES
              if _typed_key(spaces.get(FAMILIES[op], TARGETS[backend]), "bool")[0] is not None]


@pytest.mark.parametrize("op,backend", CASES)
def test_a_value_of_the_wrong_type_is_refused_naming_the_key(op, backend):
    if backend == "tpu":
        pytest.importorskip("jax")
    name, wrongs = _wrong_types(op, backend)
    assert name is not None
    for wrong in wrongs:
        with pytest.raises(InputError, match=name.split(".")[-1]):
            _call(op, backend, nest({name: wrong}))


@pytest.mark.parametrize("op,backend", BOOL_CASES)
def test_an_integer_for_a_bool_is_refused_naming_the_key(op, backend):
    name, value = _typed_key(spaces.get(FAMILIES[op], TARGETS[backend]), "bool")
    with pytest.raises(InputError, match=name.split(".")[-1]):
        _call(op, backend, nest({name: int(value)}))


@pytest.mark.parametrize("op", list(FAMILIES))
def test_the_reference_refuses_any_config(op):
    for config in ({"bogus": 1}, {"BLOCK_M": 64}, "autotune"):
        with pytest.raises(InputError, match="config"):
            _call(op, "reference", config)


def test_autotune_stays_valid_where_it_is_and_nowhere_else():
    from ceiling.gemm.spec import check
    from ceiling.op import get

    problem = check(torch.randn(32, 32), torch.randn(32, 32))
    call = get("gemm").select(problem, "nvidia", None)
    assert call.forward.config is not None
    with pytest.raises(InputError, match="config"):
        _call("gemm", "amd", "autotune")
    with pytest.raises(InputError, match="config"):
        _call("attention", "nvidia", "autotune")
