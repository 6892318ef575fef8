"""The packages' layering: the runtime and the simulator share policy/ and conf/, never each other; policy/ is
torch-free; analysis/ reads run dirs, not benchmarks. Checked twice: what importing a package loads (sys.modules, in
a fresh interpreter) and what its source imports anywhere, function-level imports included (ast)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "runtime": {"simulator", "bench", "calibration", "analysis"},
    "simulator": {"runtime", "torch", "kernels", "bench", "calibration", "analysis"},
    "policy": {"runtime", "simulator", "torch", "kernels", "bench", "calibration", "analysis"},
    "analysis": {"bench"},
}
"""Top-level packages each package must not import."""


def _loaded_after(statement: str) -> set[str]:
    """Top-level names of the modules a fresh interpreter holds after running `statement` in the repository."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _imports_every_module(package: str) -> str:
    return (f"import importlib, pkgutil, {package}\n"
            f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
            f"    importlib.import_module(m.name)")


def test_importing_the_runtime_engine_loads_no_simulator_module():
    loaded = _loaded_after("import runtime.engine")
    assert "runtime" in loaded and "policy" in loaded
    assert not loaded & FORBIDDEN["runtime"]


@pytest.mark.parametrize("package", ["simulator", "policy"])
def test_importing_every_module_of_a_torch_free_package_loads_no_runtime_or_torch(package):
    loaded = _loaded_after(_imports_every_module(package))
    assert package in loaded
    assert not loaded & FORBIDDEN[package]


def _project_imports(path: Path) -> set[str]:
    """Top-level names a source file imports anywhere (module level or inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_source_file_imports_a_forbidden_package(package):
    bad = {str(p.relative_to(REPO)): sorted(_project_imports(p) & FORBIDDEN[package])
           for p in sorted((REPO / package).rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}
