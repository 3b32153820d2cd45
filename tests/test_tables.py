"""The tuned tables: every entry is a point of its family's space, and every shipped problem gets
the config it got before the op layer (``tests/data/resolved_configs/<family>.json``, captured
from the code that read the four older table formats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ceiling import spaces, tables
from ceiling.errors import InputError
from ceiling.op import get, resolve_config

DATA = Path(__file__).parent / "data" / "resolved_configs"
TABLES = sorted(tables.ROOT.glob("*/tables/*/*.json"))


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(tables.ROOT)))
def test_every_table_entry_is_a_point_of_its_space(path):
    table = tables.read(path)
    backend, device = path.parts[-4], path.parts[-2]
    assert table["family"] == path.stem and table["device"] == device
    target = device if device in spaces.targets(table["family"]) else None
    for i, entry in enumerate(table["entries"]):
        assert set(entry) <= {"when", "config", "source", "why", "measured", "default", "label"}, (i, sorted(entry))
        assert entry.get("source") in ("measured", "prior", "derived", "published"), (i, entry.get("source"))
        if entry.get("source") == "measured":
            assert {"device", "date", "git_commit"} <= set(entry["measured"]), i
        for t in [target] if target else spaces.targets(table["family"]):
            if spaces.get(table["family"], t).backend == backend:
                spaces.check(table["family"], t, entry.get("config") or {}, partial=True)


def _rows(family: str) -> list[dict]:
    """The captured rows; where a file lists its problems and configs once, a row names them by index."""
    data = json.loads((DATA / f"{family}.json").read_text())
    if "problems" not in data:
        return data["rows"]
    return [{**r, "problem": data["problems"][r["problem"]], "config": data["configs"][r["config"]]}
            for r in data["rows"]]


def attention_problem(row: dict):
    from ceiling.attention.spec import AttentionProblem

    p = row["problem"]
    full = (p["batch"], p["heads"], p["q_len"], p["k_len"])
    return AttentionProblem(
        framework=row["framework"], device="cuda:0" if row.get("gpu") else "cpu", gpu=row.get("gpu"),
        arch=row.get("arch"), batch=p["batch"], q_len=p["q_len"], k_len=p["k_len"], heads=p["heads"],
        kv_heads=p["kv_heads"], head_dim=p["head_dim"], dtype=p["dtype"], causal=p["causal"],
        scale=p["head_dim"] ** -0.5, bias_shape=full if p["biased"] else None, has_mask=False,
        bias_dtype="float32" if p["biased"] else None)


def scaled_gemm_problem(row: dict):
    from ceiling.scaled_gemm.spec import ScaledGemmProblem

    return ScaledGemmProblem(framework=row["framework"], device="cuda:0" if row.get("gpu") else "cpu", gpu=row.get("gpu"),
                             arch=row.get("arch"), **row["problem"])


def gemm_problem(row: dict):
    from ceiling.gemm.spec import GemmProblem

    p = row["problem"]
    device = ("cuda:0" if row["framework"] == "torch" else "gpu:0") if row.get("gpu") else "cpu"
    return GemmProblem(
        framework=row["framework"], device=device, gpu=row.get("gpu"), arch=row.get("arch"), batch=p["batch"],
        m=p["m"], n=p["n"], k=p["k"], dtype=p["dtype"], out_dtype=p["out_dtype"],
        bias_dtype=p["dtype"] if p["bias"] else None, activation=None, b_shared=p["b_shared"])


def triangle_attention_problem(row: dict):
    from ceiling.triangle.spec import TriangleAttentionProblem

    p = row["problem"]
    return TriangleAttentionProblem(
        framework=row["framework"], device="cuda:0" if row.get("gpu") else "cpu", gpu=row.get("gpu"),
        arch=row.get("arch"), batch=p["batch"], n=p["n"], heads=p["heads"], head_dim=p["head_dim"], dtype=p["dtype"],
        has_mask=p["has_mask"], scale=p["head_dim"] ** -0.5, bias_dtype=p["bias_dtype"])


def trimul_problem(row: dict):
    from ceiling.triangle.spec import TrimulProblem

    p = row["problem"]
    return TrimulProblem(
        framework=row["framework"], device="cuda:0" if row.get("gpu") else "cpu", gpu=row.get("gpu"),
        arch=row.get("arch"), batch=p["batch"], n=p["n"], c_z=p["c_z"], c=p["c"], dtype=p["dtype"],
        direction=p["direction"], has_mask=p["has_mask"], eps=1e-5)


PROBLEMS = {"attention": attention_problem, "scaled_gemm": scaled_gemm_problem, "gemm": gemm_problem,
            "triangle_attention": triangle_attention_problem, "triangle_multiplicative_update": trimul_problem}


def _target_user(row: dict) -> dict | None:
    """The row's config=, naming the row's target where the implementation takes its target from
    the config."""
    user = row.get("user")
    if row["backend"] == "trainium":
        return {**(user or {}), "target": row["target"]}
    return user


@pytest.mark.parametrize("family", sorted(PROBLEMS))
def test_shipped_problems_resolve_as_before(family, monkeypatch):
    op = get(family)
    wrong = []
    for row in _rows(family):
        impl = op.implementation(row["backend"], row["implementation"])
        if row["backend"] == "tpu":  # a TPU implementation resolves for the attached chip, else this one
            for module in {impl.module, "ceiling.tpu.attention"}:
                monkeypatch.setattr(f"{module}.attached_tpu", lambda t=row["target"]: t, raising=False)
        problem = PROBLEMS[family](row)
        want = row["config"]
        if "error" in want:  # a config= refused, with the argument its InputError names
            with pytest.raises(InputError) as err:
                resolve_config(problem, impl, _target_user(row))
            if err.value.argument != want["error"]:
                wrong.append(f"{row['backend']} {row['problem']} {row['user']}: {err.value.argument} != {want}")
            continue
        got = resolve_config(problem, impl, _target_user(row)).as_dict()
        got.pop("target", None)
        if row.get("direction"):  # a Gluon row holds the tiles of one direction
            got = {row["direction"]: got[row["direction"]]}
        if got != want:
            wrong.append(f"{row['backend']}/{row['implementation']} {row.get('gpu') or row.get('target')} "
                         f"{row['framework']} {row['problem']}: {got} != {want}")
    assert not wrong, f"{len(wrong)} of {len(_rows(family))} differ:\n" + "\n".join(wrong[:10])


def test_amd_fp8_launches_keep_their_xcd_counts():
    """The XCD count an AMD FP8 GEMM launch used per device, captured with its config."""
    from ceiling.amd import devices

    rows = [r for r in _rows("scaled_gemm") if r["backend"] == "amd"]
    assert rows and all(devices.num_xcds(r["gpu"]) == r["num_xcds"] for r in rows)
