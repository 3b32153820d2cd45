"""A compile sweep through a local Ray cluster on the CPU: real sm_90a compiles, static facts as records."""

from __future__ import annotations

import random

import pytest

from ceiling.microbench import records as store
from ceiling.roofline import model, sweep
from ceiling.spaces import expressions
from ceiling.roofline.templates import export


@pytest.mark.slow  # about 75 s: a Ray cluster's start and real sm_90a compiles (CI's budget)
def test_compile_sweep_on_a_local_ray_cluster(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("ceiling.isa")
    template = export.build("gemm", "sm_90a", [])
    valid = template.valid_points({"M": 4096, "N": 4096, "K": 4096})
    points = random.sample(valid, 2)
    seen = []
    result = sweep.run(template, points, store=tmp_path / "records", num_cpus=1, progress=lambda d, t: seen.append((d, t)))
    assert result.points == 2 and result.failed == 0 and not result.refused
    assert seen[-1] == (2, 2)
    written = store.load(tmp_path / "records")
    assert len(written) == result.written == 2 * (1 + len(sweep.STATIC_METRICS))
    for config in points:
        facts = {r.metric: r.value for r in written if r.config == config}
        assert facts["compiled"] == 1.0
        assert facts["tensor_core_instructions"] > 0  # wgmma survived
        assert facts["spill_bytes"] >= 0 and 0 < facts["registers"] <= 255
        # the template's shared-memory count is what the compiler allocates, to within a few barriers
        (smem,) = [c for c in template.constraints if c.id == "shared-memory"]
        counted = expressions.evaluate(smem.expr.split("<=")[0], {**template.context(), **config})
        assert 0 <= facts["smem_bytes"] - counted <= 1024, (config, facts["smem_bytes"], counted)
    # the model finds these facts again by target and config
    idx = model.static_index(written)
    assert ("gemm", "sm_90a", model._config_key(points[0])) in idx
