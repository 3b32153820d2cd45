"""The package layout's import rules, read from the source with ``ast`` (nothing is imported).

Every import counts, at module level or inside a function: ``import a.b`` imports module
``a.b``; ``from a import b`` imports module ``a.b`` when that is a module, else ``a``. The
rules (README, "Layout"):

* the folders ``kernels``, ``microbench`` and ``roofline`` install as ``ceiling``,
  ``ceiling.microbench`` and ``ceiling.roofline`` (pyproject.toml's ``package-dir``), every
  folder with an ``__init__.py`` is a listed package, and no module imports the folder names;
* no import cycle anywhere;
* no import between vendor folders (``kernels/nvidia``, ``kernels/amd``, ``kernels/tpu``,
  ``kernels/trainium``): NVIDIA and AMD share code only through ``kernels/triton``;
* nothing in ``kernels/`` but the tuning layer itself imports ``ceiling.tuning`` (the kernels, the
  ops and their front ends, ``config="autotune"``): the sweeps sit above them;
* layers: ``kernels`` never imports ``microbench`` or ``roofline``; ``microbench`` never
  imports ``roofline``.

The walker is also run on a small planted package with a cycle and a vendor-to-vendor import,
so a walker that stopped seeing imports would fail here.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
# folder -> the package it installs as
PACKAGES = {folder: package for package, folder in SETUPTOOLS["package-dir"].items()}
VENDORS = ("ceiling.nvidia", "ceiling.amd", "ceiling.tpu", "ceiling.trainium")
# (layer, the layers above it); a module's layer is the folder it lives in
LAYERS = (("kernels", ("microbench", "roofline")), ("microbench", ("roofline",)))


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` file under the package folders."""
    found = {}
    for folder, package in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def folder_of(path: Path, root: Path) -> str:
    return path.relative_to(root).parts[0]


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


def layers(root: Path = ROOT, packages=PACKAGES) -> dict[str, str]:
    """Module name -> its layer (the folder it lives in)."""
    return {name: folder_of(path, root) for name, path in modules(root, packages).items()}


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


def violations(edges: dict[str, set[str]], layer: dict[str, str] | None = None) -> list[str]:
    """Each import that breaks a rule other than 'no cycle', as 'importer -> imported: why'."""
    layer = layers() if layer is None else layer
    bad = []
    for importer, targets in sorted(edges.items()):
        for target in sorted(targets):
            if any(_within(importer, a) and _within(target, b) for a in VENDORS for b in VENDORS if a != b):
                bad.append(f"{importer} -> {target}: no import between vendor folders")
            tuning = _within(target, "ceiling.tuning") and not _within(importer, "ceiling.tuning")
            if layer[importer] == "kernels" and tuning:
                bad.append(f"{importer} -> {target}: kernels never import the tuning layer")
            for lower, higher in LAYERS:
                if layer[importer] == lower and layer[target] in higher:
                    bad.append(f"{importer} -> {target}: {lower} is below {', '.join(higher)}")
    return bad


EDGES = graph()


def test_the_walker_sees_the_packages():
    assert {"ceiling", "ceiling.backends", "ceiling.microbench.gpu", "ceiling.roofline.cli"} <= set(EDGES)
    # a function-level import and a 'from package import module' both count
    assert "ceiling.availability" in EDGES["ceiling.op"]
    assert "ceiling.tables" in EDGES["ceiling.op"]
    assert "ceiling.isa" in EDGES["ceiling.roofline.sweep"]


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
        "kernels/nvidia/flash.py": "def f():\n    from ceiling.amd import table\n",
        "kernels/amd/__init__.py": "",
        "kernels/amd/table.py": "X = 1\n",
        "kernels/tuning/__init__.py": "",
        "kernels/tuning/sweep.py": "from . import cache\n",
        "kernels/tuning/cache.py": "def g():\n    import ceiling.tuning.sweep\n",
        "kernels/triton/__init__.py": "",
        "kernels/triton/gemm.py": "from ceiling.tuning.cache import g\n",
        "microbench/__init__.py": "",
        "microbench/timing.py": "import ceiling.roofline.model\n",
        "roofline/__init__.py": "",
        "roofline/model.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    edges = graph(tmp_path)
    assert cycles(edges) == [["ceiling.tuning.cache", "ceiling.tuning.sweep"]]
    assert violations(edges, layers(tmp_path)) == [
        "ceiling.microbench.timing -> ceiling.roofline.model: microbench is below roofline",
        "ceiling.nvidia.flash -> ceiling.amd.table: no import between vendor folders",
        "ceiling.triton.gemm -> ceiling.tuning.cache: kernels never import the tuning layer",
    ]


def test_every_package_folder_is_listed_and_installs_under_ceiling():
    """pyproject.toml names the packages one by one (package-dir cannot glob a renamed folder):
    a new folder with an __init__.py that is not listed would be missing from a wheel."""
    folders = set()
    for folder, package in PACKAGES.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            folders.add(".".join([package, *init.parent.relative_to(ROOT / folder).parts]))
    assert folders == set(SETUPTOOLS["packages"])
    assert set(PACKAGES.values()) == {"ceiling", "ceiling.microbench", "ceiling.roofline"}


def test_no_module_imports_a_folder_name():
    """``kernels``, ``microbench`` and ``roofline`` are folders, not import names: an import of one
    works only where the repository root is on sys.path and breaks an installed ``ceiling``
    (next to Hugging Face's ``kernels`` it would even load theirs)."""
    bad = []
    for path in [*modules(ROOT).values(), *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                    if n.split(".")[0] in PACKAGES]
    assert not bad, "\n".join(bad)


def test_the_tests_import_the_installed_package():
    """No repository folder is on sys.path (pytest runs with --import-mode=importlib), so what the
    tests import is what `pip install` made importable as ``ceiling``."""
    import ceiling

    assert str(ROOT) not in [str(Path(p).resolve()) for p in sys.path if p]
    assert Path(ceiling.__file__).resolve().parent.name in ("kernels", "ceiling")
