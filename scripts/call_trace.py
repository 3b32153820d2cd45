"""What one op call goes through: the project modules it crosses and how often it resolves and
validates its config.

    python scripts/call_trace.py            # ceiling.attention(q, k, v, backend="nvidia"), forward, CPU tensors

The call runs once first (imports, compiles, caches), then once under a profiler that records
every function entered: the modules are those whose functions ran, the resolutions are calls
of ceiling.spaces.config.resolve, the validations calls of Space.check on the outermost config.
"""

from __future__ import annotations

import sys
from collections import Counter


PACKAGE = "ceiling"


def trace(call) -> tuple[list[str], Counter]:
    modules: set[str] = set()
    counts: Counter = Counter()
    depth = {"check": 0}

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        module = frame.f_globals.get("__name__") or ""
        if not module.startswith(PACKAGE + ".") and module != PACKAGE:
            return
        if event == "call":
            modules.add(module)
        name = f"{frame.f_globals.get('__name__')}.{code.co_name}"
        if name == "ceiling.spaces.config.resolve" and event == "call":
            counts["config resolved"] += 1
        if name == "ceiling.spaces.schema.check":
            if event == "call":
                depth["check"] += 1
                if depth["check"] == 1:
                    counts["config validated"] += 1
            else:
                depth["check"] -= 1

    call()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return sorted(modules), counts


def attention_forward():
    import torch

    import ceiling

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 64, 2, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    return lambda: ceiling.attention(q, k, v, backend="nvidia")


if __name__ == "__main__":
    modules, counts = trace(attention_forward())
    print(f"ceiling.attention(q, k, v, backend='nvidia'), forward on CPU tensors: {len(modules)} project modules")
    for m in modules:
        print(f"  {m}")
    print(f"config resolved {counts['config resolved']} time(s), validated {counts['config validated']} time(s)")
