"""The package layout's import rules, read from the source with ``ast`` (nothing is imported).

Every import counts, at module level or inside a function: ``import a.b`` imports module
``a.b``; ``from a import b`` imports module ``a.b`` when that is a module, else ``a``. The
rules (README, "Layout"):

* no import cycle anywhere in ``kernels``, ``microbench``, ``roofline``;
* no import between vendor folders (``kernels/nvidia``, ``kernels/amd``, ``kernels/tpu``,
  ``kernels/trainium``): NVIDIA and AMD share code only through ``kernels/triton``;
* the kernels (``kernels/{triton,nvidia,amd,tpu,trainium}``) never import ``kernels.tuning``;
* layers: ``kernels`` never imports ``microbench`` or ``roofline``; ``microbench`` never
  imports ``roofline``.

The walker is also run on a small planted package with a cycle and a vendor-to-vendor import,
so a walker that stopped seeing imports would fail here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "microbench", "roofline")
KERNEL_FOLDERS = ("kernels.triton", "kernels.nvidia", "kernels.amd", "kernels.tpu", "kernels.trainium")
VENDORS = ("kernels.nvidia", "kernels.amd", "kernels.tpu", "kernels.trainium")
LAYERS = (("kernels", ("microbench", "roofline")), ("microbench", ("roofline",)))


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` file under the packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` (source ``path``) imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = []
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.append(submodule if submodule in known else source)
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Each import that breaks a rule other than 'no cycle', as 'importer -> imported: why'."""
    bad = []
    for importer, targets in sorted(edges.items()):
        for target in sorted(targets):
            if any(_within(importer, a) and _within(target, b) for a in VENDORS for b in VENDORS if a != b):
                bad.append(f"{importer} -> {target}: no import between vendor folders")
            if any(_within(importer, k) for k in KERNEL_FOLDERS) and _within(target, "kernels.tuning"):
                bad.append(f"{importer} -> {target}: kernels never import the tuning layer")
            for lower, higher in LAYERS:
                if _within(importer, lower) and any(_within(target, h) for h in higher):
                    bad.append(f"{importer} -> {target}: {lower} is below {', '.join(higher)}")
    return bad


EDGES = graph()


def test_the_walker_sees_the_packages():
    assert {"kernels", "kernels.backends", "microbench.gpu", "roofline.cli"} <= set(EDGES)
    # a function-level import and a 'from package import module' both count
    assert "kernels.backends" in EDGES["kernels.gemm.torch_op"]
    assert "kernels.isa" in EDGES["roofline.sweep"]


def test_no_import_cycles():
    found = cycles(EDGES)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_vendor_to_vendor_tuning_or_upward_imports():
    bad = violations(EDGES)
    assert not bad, "\n".join(bad)


def test_the_walker_reports_a_planted_cycle_and_vendor_import(tmp_path):
    files = {
        "kernels/__init__.py": "",
        "kernels/nvidia/__init__.py": "",
        "kernels/nvidia/flash.py": "def f():\n    from kernels.amd import table\n",
        "kernels/amd/__init__.py": "",
        "kernels/amd/table.py": "X = 1\n",
        "kernels/tuning/__init__.py": "",
        "kernels/tuning/sweep.py": "from . import cache\n",
        "kernels/tuning/cache.py": "def g():\n    import kernels.tuning.sweep\n",
        "kernels/triton/__init__.py": "",
        "kernels/triton/gemm.py": "from kernels.tuning.cache import g\n",
        "microbench/__init__.py": "",
        "microbench/timing.py": "import roofline.model\n",
        "roofline/__init__.py": "",
        "roofline/model.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    edges = graph(tmp_path)
    assert cycles(edges) == [["kernels.tuning.cache", "kernels.tuning.sweep"]]
    assert violations(edges) == [
        "kernels.nvidia.flash -> kernels.amd.table: no import between vendor folders",
        "kernels.triton.gemm -> kernels.tuning.cache: kernels never import the tuning layer",
        "microbench.timing -> roofline.model: microbench is below roofline",
    ]
