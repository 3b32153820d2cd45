"""The proofs that are not one kernel's contract: the Hopper launchers' TMA descriptors
(:mod:`ceiling.verify.tma`) and the Gluon kernels' barrier protocol at their shipped configs
(:mod:`ceiling.verify.protocol`), cached like the contracts' by a digest of what they read."""

from __future__ import annotations

import hashlib
import importlib.util
import json

# Each group: the modules whose source its answer depends on (the prover's and the launchers').
GROUPS = {
    "tma": ("ceiling.verify.tma", "ceiling.nvidia.tma_descriptors", "ceiling.nvidia.gluon.tma_descriptors",
            "ceiling.nvidia.gemm", "ceiling.nvidia.gemm_fp8", "ceiling.nvidia.attention", "ceiling.triton.attention"),
    "protocol": ("ceiling.verify.protocol", "ceiling.verify.barriers", "ceiling.verify.ttgir",
                 "ceiling.nvidia.gluon.attention", "ceiling.nvidia.gluon.attention_fwd",
                 "ceiling.nvidia.gluon.attention_bwd", "ceiling.spaces"),
}


def _source(module: str) -> str:
    """A module's source, read as text (the Gluon kernel modules are not imported: importing them
    needs Gluon's API of the pinned Triton)."""
    spec = importlib.util.find_spec(module)
    with open(spec.origin) as f:
        return f.read()


def digest(group: str) -> str:
    import triton
    import z3

    parts = [_source(m) for m in GROUPS[group]] + [triton.__version__, z3.get_version_string()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _run(group: str) -> list:
    if group == "tma":
        from ceiling.verify import tma

        return tma.verify_all(("sm_90a",))
    from ceiling.verify import protocol

    return protocol.verify_all(scope="shipped")


def verify_all(use_cache: bool = True):
    """Yields (group, results, cached) for each group."""
    from ceiling.verify.project import cache_dir
    from ceiling.verify.result import Result

    for group in GROUPS:
        path = cache_dir() / f"{group}-{digest(group)}.json"
        if use_cache and path.is_file():
            yield group, [Result.from_dict(d) for d in json.loads(path.read_text())], True
            continue
        results = _run(group)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([r.as_dict() for r in results]))
        yield group, results, False

