"""The layout docs/architecture.md describes: one installed namespace, and a library that
imports neither Prefect, MLflow nor the app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"platonic_core": "platonic.core", "tasks": "platonic.tasks", "flows": "platonic.flows"}


def test_every_package_folder_is_installed_under_the_namespace():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([name, *rel]))
    assert found <= listed, f"package folders missing from pyproject.toml: {sorted(found - listed)}"
    assert not any(p.split(".")[0] in ("tasks", "flows", "platonic_core") for p in listed)
    assert {tool["package-dir"][n] for n in FOLDERS.values()} == set(FOLDERS)


def test_the_library_imports_no_prefect_mlflow_or_app():
    """Import every module of platonic.core in a fresh interpreter: none pulls Prefect,
    MLflow, platonic.tasks or platonic.flows (what a notebook user gets)."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import platonic.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'platonic.core.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('prefect', 'mlflow')\n"
        "             or n.startswith(('platonic.tasks', 'platonic.flows')))\n"
        "print(','.join(bad))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "", f"platonic.core pulled in: {p.stdout.strip()[:500]}"
