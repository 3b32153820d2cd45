"""The Gluon static check's cases, run in one process under one Triton (by ``pinned_triton``):
every shipped config of the Gluon attention, and small kernels that plant the regressions the
check must catch.

    python -m tests.gluon_static_cases --json OUT

Planted (each a real Gluon kernel, compiled for sm_90a like the shipped ones):

* ``designed``: a producer warp feeding two wgmma consumer warpgroups over mbarriers (the
  shape of the real kernels); it must pass, or the regressions below would prove nothing;
* ``one_consumer``: the same with a single consumer warpgroup;
* ``no_producer``: two consumers that fetch their tiles with pointer loads, no TMA producer;
* ``no_reallocation``: the real forward (head dim 128, causal) with its consumers held to 160
  registers instead of 240.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ceiling.nvidia.gluon import sass_facts, static_check
from ceiling.nvidia.gluon.api import (
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    tma_load,
    warpgroup_mma,
    warpgroup_mma_wait,
)

TILE = gl.constexpr(64)


@gluon.jit
def _consume(tile_smem, ready, out, WG: gl.constexpr):
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    mbarrier.wait(ready, 0)
    acc = warpgroup_mma(tile_smem, tile_smem.permute((1, 0)), gl.zeros([TILE, TILE], gl.float32, layout),
                        use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    rows = gl.arange(0, TILE, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, TILE, layout=gl.SliceLayout(0, layout))
    gl.store(out + WG * TILE * TILE + gl.expand_dims(rows, 1) * TILE + gl.expand_dims(cols, 0), acc)


@gluon.jit
def _produce(desc, tile_smem, ready):
    mbarrier.expect(ready, desc.block_type.nbytes)
    tma_load(desc, [0, 0], ready, tile_smem)


@gluon.jit
def designed(desc, out):
    tile_smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(ready, count=1)
    gl.warp_specialize([(_consume, (tile_smem, ready, out, 0)), (_consume, (tile_smem, ready, out, 1)),
                        (_produce, (desc, tile_smem, ready))], [4, 1], [240, 24])


@gluon.jit
def one_consumer(desc, out):
    tile_smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(ready, count=1)
    gl.warp_specialize([(_consume, (tile_smem, ready, out, 0)), (_produce, (desc, tile_smem, ready))], [1], [24])


@gluon.jit
def _fetch_and_consume(src, tile_smem, out, WG: gl.constexpr):
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, TILE, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, TILE, layout=gl.SliceLayout(0, blocked))
    tile_smem.store(gl.load(src + gl.expand_dims(rows, 1) * TILE + gl.expand_dims(cols, 0)))
    fence_async_shared()
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    acc = warpgroup_mma(tile_smem, tile_smem.permute((1, 0)), gl.zeros([TILE, TILE], gl.float32, layout),
                        use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    out_rows = gl.arange(0, TILE, layout=gl.SliceLayout(1, layout))
    out_cols = gl.arange(0, TILE, layout=gl.SliceLayout(0, layout))
    gl.store(out + WG * TILE * TILE + gl.expand_dims(out_rows, 1) * TILE + gl.expand_dims(out_cols, 0), acc)


@gluon.jit
def no_producer(src, out):
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, TILE], gl.bfloat16)
    tiles = gl.allocate_shared_memory(gl.bfloat16, [2, TILE, TILE], layout)
    gl.warp_specialize([(_fetch_and_consume, (src, tiles.index(0), out, 0)),
                        (_fetch_and_consume, (src, tiles.index(1), out, 1))], [4], [240])


def _compile(fn, signature: dict):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    return triton.compile(GluonASTSource(fn, signature, {}, {}), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4})


def planted() -> list[dict]:
    tile = static_check._desc("bfloat16", [64, 64])
    cases = [("designed", designed, {"desc": tile, "out": "*fp32"}),
             ("one_consumer", one_consumer, {"desc": tile, "out": "*fp32"}),
             ("no_producer", no_producer, {"src": "*bf16", "out": "*fp32"})]
    out = []
    for name, fn, sig in cases:
        f = sass_facts.facts(_compile(fn, sig))
        out.append({"name": name, "violations": sass_facts.violations(f, sass_facts.Design()), "summary": f.summary()})
    from ceiling.nvidia.gluon.attention import shipped

    entry = shipped()[128]["fwd"]
    starved = static_check.spec("fwd", 128, True, {**entry, "consumer_regs": 160})
    result = static_check.check(starved)
    out.append({"name": "no_reallocation", "violations": result["violations"], "summary": result["summary"]})
    return out


def main(argv: list[str] | None = None) -> int:
    import triton

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, required=True)
    opts = parser.parse_args(argv)
    shipped = []
    for s in static_check.shipped():
        try:
            shipped.append(static_check.check(s))
        except Exception as exc:  # noqa: BLE001 - reported as the config's violation
            shipped.append({"name": s.name, "config": s.config, "facts": None, "summary": s.name,
                            "violations": [f"does not compile: {type(exc).__name__}: {str(exc)[-800:]}"]})
    report = {"triton": triton.__version__, "shipped": shipped, "planted": planted()}
    opts.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
