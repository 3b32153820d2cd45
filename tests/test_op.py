"""The op layer: one place chooses the implementation, a call's config is resolved and validated
once and passed down, a call survives its trip through a custom op's string argument."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import ceiling
from ceiling import op as ops
from ceiling.attention.op import ATTENTION
from ceiling.attention.spec import check
from ceiling.errors import BackendUnavailable, InputError

ROOT = Path(__file__).resolve().parent.parent


def _call_trace():
    spec = importlib.util.spec_from_file_location("call_trace", ROOT / "scripts" / "call_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_forward_call_resolves_and_validates_its_config_once():
    """``scripts/call_trace.py`` (the command the README names) on the forward attention call."""
    trace = _call_trace()
    modules, counts = trace.trace(trace.attention_forward())
    assert counts["config resolved"] == 1 and counts["config validated"] == 1, counts
    assert "ceiling.op" in modules and "ceiling.frontends.torch" in modules
    # with a config=, still once: the caller's keys are checked with the merged config
    q = torch.randn(1, 16, 1, 32, dtype=torch.bfloat16)
    _, counts = trace.trace(lambda: ceiling.attention(q, q, q, backend="nvidia", config={"fwd": {"block_n": 16}}))
    assert counts["config resolved"] == 1 and counts["config validated"] == 1, counts


def test_a_planted_second_resolution_is_counted(monkeypatch):
    """The count above can fail: a launcher that resolves its config again is seen."""
    trace = _call_trace()
    from ceiling.nvidia import attention as launcher

    real = launcher.forward

    def forward_resolving_again(problem, config, *arrays):
        ops.resolve_config(problem, ATTENTION.implementation("nvidia"), None)
        return real(problem, config, *arrays)

    monkeypatch.setattr(launcher, "forward", forward_resolving_again)
    _, counts = trace.trace(trace.attention_forward())
    assert counts["config resolved"] == 2


def test_a_call_round_trips_through_its_key():
    q = torch.randn(2, 9, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 11, 2, 64, dtype=torch.bfloat16)
    problem = check(q, k, k, causal=True, bias=torch.randn(4, 9, 11), backend="nvidia")
    call = ATTENTION.select(problem, "nvidia", {"fwd": {"block_m": 32}})
    ops._CALLS.clear()  # decode from the text alone, as a process that never made the call would
    again = ops.Call.from_key(call.key())
    assert again == call and again.problem == problem and again.forward.config == call.forward.config
    assert again.forward.config["fwd"]["block_m"] == 32
    with pytest.raises(TypeError):
        again.forward.config["fwd"]["block_m"] = 64  # a resolved config is read-only


def test_selection_names_the_backend_and_why():
    q = torch.randn(1, 8, 1, 32, dtype=torch.bfloat16)
    problem = check(q, q, q, backend="nvidia")
    call = ATTENTION.select(problem, "nvidia", {"implementation": "gluon"})
    assert call.forward.implementation.name == "triton"
    assert "Gluon has no interpreter" in call.forward.why
    with pytest.raises(InputError, match="backend"):
        ceiling.attention(q, q, q, backend="cuda")
    with pytest.raises(InputError, match="has no config"):
        ceiling.attention(q, q, q, backend="reference", config={"fwd": {"block_m": 32}})


def test_an_op_without_a_backend_says_why():
    op = ops.Op("toy", implementations=(ops.Implementation("toy", "reference", "reference", "ceiling.attention.reference"),),
                missing={"tpu": "no Pallas kernel: the MXU cannot do this"})
    with pytest.raises(BackendUnavailable, match="MXU"):
        op.select(check(*(torch.randn(1, 8, 1, 32),) * 3), "tpu")


def test_under_torch_compile_the_call_is_decided_when_the_op_runs():
    """While dynamo traces, shapes may be symbolic: the custom op carries the call's arguments and
    decides it at run time; the result equals eager mode's."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 24, 2, 32, generator=g, dtype=torch.bfloat16) for _ in range(3))
    f = lambda q, k, v: ceiling.attention(q, k, v, causal=True, backend="nvidia",  # noqa: E731
                                          config={"fwd": {"block_m": 16, "block_n": 16}})
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v), rtol=0, atol=0)
    bigger = [torch.randn(1, 40, 2, 32, generator=g, dtype=torch.bfloat16) for _ in range(3)]
    torch.testing.assert_close(compiled(*bigger), f(*bigger), rtol=0, atol=0)


def test_the_registry_knows_every_op_package():
    assert set(ops.OP_PACKAGES) >= {"attention", "gemm", "scaled_gemm", "fp8_quantize", "triangle_attention",
                                    "triangle_multiplicative_update"}
    assert ops.get("attention") is ATTENTION
    assert [i.label for i in ATTENTION.implementations] == ["reference", "nvidia:gluon", "nvidia", "amd", "tpu",
                                                            "trainium"]
    assert "ceiling.attention.op" in sys.modules


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_the_config_names_the_chip_its_tables_and_space_come_from(chip):
    from ceiling.attention.spec import shipped_problem

    problem = shipped_problem(64, "bfloat16", causal=False)
    config = ops.resolve_config(problem, ATTENTION.implementation("trainium"), {"target": chip})
    assert config.target == chip and config["target"] == chip
