"""The device side of the numerics suite: the probes and random GEMMs as Triton kernels. On a CPU the
kernels run interpreted through the model (the plumbing); on an NVIDIA GPU (tests marked gpu,
scripts/h200_check.sh numerics) they measure the tensor cores against the published model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ceiling
from ceiling.numerics import device, suite
from ceiling.triton_runtime import tensor_core_numerics

MODELLED = ["fp16", "bf16", "e4m3", "e5m2"]  # the interpreter ladder leaves tf32 dots in float32


def test_the_probe_kernel_interpreted_through_the_model_reads_the_published_table():
    with tensor_core_numerics("h100"):
        rows = suite.table("h100", device.backend("cpu"), MODELLED)
    assert all(r["differs"] == [] for r in rows), rows


def test_bit_equality_interpreted_through_the_model_finds_no_mismatch_and_would_find_one():
    with tensor_core_numerics("b200"):
        same = device.bit_equality("b200", "cpu", kinds=("e4m3", "bf16"), m=64, n=64, k=128)
        other = device.bit_equality("h100", "cpu", kinds=("e4m3",), m=64, n=64, k=128)
    assert [r["mismatches"] for r in same] == [0, 0]
    assert other[0]["mismatches"] > 0 and other[0]["first"]["device"] != other[0]["first"]["model"]


def test_device_names_map_to_their_published_targets():
    assert device.target_of("NVIDIA H200") == "h100" and device.target_of("NVIDIA H100 80GB HBM3") == "h100"
    assert device.target_of("NVIDIA B200") == "b200" and device.target_of("NVIDIA GB200") == "b200"
    assert device.target_of("AMD Instinct MI300X") is None


gpu = pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the CPU tests "
                         "above check the same kernels interpreted through the model")


def _target():
    target = device.target_of(torch.cuda.get_device_name())
    if target is None:
        pytest.skip(f"no published tensor-core model for {torch.cuda.get_device_name()}")
    return target


@pytest.mark.gpu
@gpu
def test_device_follows_the_published_feature_table():
    target = _target()
    rows = suite.table(target, device.backend("cuda"))
    assert all(r["differs"] == [] for r in rows), [(r["kind"], r["features"]) for r in rows if r["differs"]]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kind", device.BIT_EQUALITY_KINDS)
def test_device_gemm_equals_the_model_in_every_bit(kind):
    (row,) = device.bit_equality(_target(), "cuda", kinds=(kind,), m=128, n=128, k=512, seed=7)
    assert row["mismatches"] == 0, row


@pytest.mark.gpu
@gpu
def test_device_fp8_gemm_kernel_equals_the_interpreted_ladder():
    """The project's FP8 kernel on the device (64-row tiles: a warpgroup's wgmma) against the same
    kernel interpreted through the model."""
    from tests.test_numerics_ladder import fp8_case

    a, b, one, cfg = fp8_case(128, 128, 512, promote=0, block=64)
    got = ceiling.scaled_gemm(a.cuda(), b.cuda(), one.cuda(), one.cuda(), out_dtype=torch.float32,
                              backend="nvidia", config=cfg).cpu()
    with tensor_core_numerics(_target()):
        want = ceiling.scaled_gemm(a, b, one, one, out_dtype=torch.float32, backend="nvidia", config=cfg)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))


@pytest.mark.parametrize("as_json", [True, False])
def test_the_device_command_reports_through_the_interpreter(as_json, monkeypatch, capsys):
    """numerics-device's whole report, with the GPU stood in for by the interpreter through the model:
    what the h200_check part reads from its JSON is there."""
    import functools
    import json
    import sys

    from ceiling.roofline.cli import main

    run = device.run
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")
    monkeypatch.setattr(device, "run", lambda *a, **k: run(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(device, "bit_equality", functools.partial(device.bit_equality, m=64, n=64, k=64))
    monkeypatch.setattr(sys, "argv", ["ceiling", "microbench", "numerics-device"] + (["--json"] if as_json else []))
    monkeypatch.setenv("COLUMNS", "200")
    with tensor_core_numerics("h100"), pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    if not as_json:
        assert "measured on NVIDIA H200" in out and "every bit" in out and "differs" in out
        return
    report = json.loads(out)
    assert device.summary(report).startswith("numerics: NVIDIA H200 | model h100")
    assert report["device"] == "NVIDIA H200" and report["target"] == "h100" and report["bit_equal"] is True
    rows = {r["kind"]: r for r in report["targets"][0]["rows"]}
    assert all(rows[k]["differs"] == [] for k in MODELLED)
    assert rows["tf32"]["differs"] and report["follows_published"] is False  # float32 interpreter dots


def test_a_kind_that_fails_on_the_device_is_reported_and_the_others_still_run(monkeypatch, capsys):
    import functools
    import json
    import sys

    from ceiling.roofline.cli import main

    run = device.run

    def flaky(kind, *a, **k):
        if kind == "fp16":
            raise RuntimeError("no fp16 kernel here")
        return run(kind, *a, **{**k, "device": "cpu"})

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(device, "run", flaky)
    monkeypatch.setattr(device, "BIT_EQUALITY_KINDS", ("fp16", "e4m3"))
    monkeypatch.setattr(device, "bit_equality", functools.partial(device.bit_equality, m=64, n=64, k=64))
    monkeypatch.setattr(sys, "argv", ["ceiling", "microbench", "numerics-device", "--json"])
    with tensor_core_numerics("h100"), pytest.raises(SystemExit):
        main()
    report = json.loads(capsys.readouterr().out)
    rows = {r["kind"]: r for r in report["targets"][0]["rows"]}
    assert rows["fp16"]["error"] == "RuntimeError: no fp16 kernel here" and rows["e4m3"]["differs"] == []
    assert [r.get("error", "") for r in report["bit_equality"]] == ["RuntimeError: no fp16 kernel here", ""]
    assert report["bit_equal"] is False and report["follows_published"] is False
