"""What the tensor-core model says about a template's points: the FP8 GEMM's promotion interval. The
Hopper FP8 template carries the modelled error of each promotion setting (the table ``python -m
ceiling.numerics.promotion`` wrote to ``roofline/data/numerics/fp8_promotion.json``) and a
search-only constraint that refuses a point whose run of K in the narrowed wgmma accumulator (all of
K when it never promotes, else ``BLOCK_K * PROMOTE_STEPS`` or K if shorter) is longer than the table
allows (``max_unpromoted_k``). A target whose MMA arithmetic has no published model says so instead.
"""

from __future__ import annotations

from typing import Any

from ceiling.roofline.templates.schema import Constraint

# template target -> the ceiling.numerics target of its FP8 instruction
FP8_TARGETS = {"sm_90a": "h100", "gfx942": "mi300x"}
RUN = "(K if PROMOTE_STEPS == 0 else min(K, BLOCK_K*PROMOTE_STEPS))"


def fp8_promotion(target: str) -> tuple[dict[str, Any], dict[str, float], list[Constraint]]:
    """(the template's ``numerics`` entry, problem defaults to add, constraints to add) for the FP8 GEMM."""
    from ceiling.numerics import Unpublished, canonical_target
    from ceiling.numerics import promotion

    name = FP8_TARGETS.get(target)
    if name is None:
        return {}, {}, []
    try:
        model = canonical_target(name)
    except Unpublished as err:
        return {"status": "unpublished", "why": str(err)}, {}, []
    data = promotion.load()
    if data["model"]["target"] != model:
        raise ValueError(f"fp8_promotion.json models {data['model']['target']}, the {target} template needs {model}")
    errors: dict[str, dict[str, float]] = {}
    for row in data["rows"]:
        errors.setdefault(str(row["interval"]), {})[str(row["K"])] = row["normwise"]
    limit = data["max_unpromoted_k"]
    numerics = {
        "promotion_error": {
            "about": "modelled normwise relative error of the accumulation against float64, by promotion interval "
                     "(BLOCK_K * PROMOTE_STEPS elements of K; 'never': PROMOTE_STEPS = 0) and K",
            "errors": errors,
            "tolerance": data["tolerance"],
            "max_unpromoted_k": limit,
            "model": data["model"],
            "how": data["how"],
            "source": "roofline/data/numerics/fp8_promotion.json",
            "created": data["created"],
            "git_commit": data["git_commit"],
        }
    }
    constraint = Constraint(
        id="promotion-accuracy", expr=f"{RUN} <= max_unpromoted_k", search_only=True,
        why=f"the wgmma accumulator keeps 13 fraction bits (published H100 model): summing more than "
            f"{limit} of K in it before the float32 promotion costs more than {data['tolerance']:.2e} relative "
            "error (modelled: numerics.promotion_error)")
    return numerics, {"max_unpromoted_k": limit}, [constraint]
