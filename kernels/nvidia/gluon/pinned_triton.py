"""The Gluon kernels' static check under a pinned Triton 3.6.0, the H200 machine's (Gluon's API moves
between releases and CI runs a newer one), from an environment with another: ``install`` puts it into
a folder of its own once (``--no-deps``, about 650 MB, under ``$CEILING_CACHE_DIR`` or
``~/.cache/ceiling``), and ``check`` runs :mod:`ceiling.nvidia.gluon.static_check` in a subprocess
whose ``sys.path`` starts there. The README's Gluon section says more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEVICE_TRITON = "3.6.0"  # the H200 machine's Triton
REPO = Path(__file__).resolve().parents[3]


def cache_dir() -> Path:
    return Path(os.environ.get("CEILING_CACHE_DIR") or Path.home() / ".cache" / "ceiling").expanduser()


def install_command(version: str, target: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(target),
            f"triton=={version}"]


def ensure(version: str = DEVICE_TRITON) -> Path:
    """The folder holding Triton ``version`` (installed on first use); raises with the command to
    run when pip cannot install it."""
    from filelock import FileLock

    target = cache_dir() / f"triton-{version}"
    done = target / ".installed"
    if done.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if done.exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"triton-{version}-", dir=target.parent))
        cmd = install_command(version, staging)
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            shown = " ".join(install_command(version, target))
            raise RuntimeError(f"could not install Triton {version} into {target} (pip exit {result.returncode}: "
                               f"{result.stderr.strip()[-400:]}); run: {shown} && touch {done}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        done.write_text(version + "\n")
    return target


def environment(version: str = DEVICE_TRITON) -> dict[str, str]:
    """Environment variables for a subprocess that imports Triton ``version`` and this package."""
    env = dict(os.environ)
    paths = [str(ensure(version)), str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    return env


def run_json(version: str, module_args: list[str], *, timeout_s: float = 900) -> dict:
    """Run ``python <module_args> --json OUT`` under Triton ``version`` (cwd: the repository) and
    return the JSON it wrote; raises with its output when it wrote none."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, *module_args, "--json", str(out)]
        result = subprocess.run(cmd, env=environment(version), cwd=REPO, capture_output=True, text=True,
                                timeout=timeout_s)
        if not out.exists():
            raise RuntimeError(f"{' '.join(module_args)} under Triton {version} wrote nothing (exit "
                               f"{result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
        return json.loads(out.read_text())


def static_check(version: str = DEVICE_TRITON) -> dict:
    """:mod:`ceiling.nvidia.gluon.static_check` of every shipped config under Triton ``version``: the
    Triton version it saw, and per config its facts and the violations found."""
    return run_json(version, ["-m", "ceiling.nvidia.gluon.static_check"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ceiling.nvidia.gluon.pinned_triton", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("install", "check"))
    parser.add_argument("--version", default=DEVICE_TRITON)
    opts = parser.parse_args(argv)
    if opts.action == "install":
        print(ensure(opts.version))
        return 0
    report = static_check(opts.version)
    bad = 0
    for entry in report["configs"]:
        print(entry["summary"])
        for v in entry["violations"]:
            print(f"  VIOLATION: {v}")
        bad += bool(entry["violations"])
    print(f"Triton {report['triton']}: {len(report['configs'])} configs, {bad} with violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
