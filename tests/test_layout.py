"""The layout docs/architecture.md describes: one installed namespace, and a library that
imports neither Prefect, MLflow nor the app."""

from __future__ import annotations

import ast
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


def _pulled_in(imports: str, unwanted: str) -> list[str]:
    """Run `imports` (Python lines) in a fresh interpreter; the modules then loaded for which
    the expression `unwanted` (of a module's name `n`) is true."""
    code = f"import sys\n{imports}\nprint(','.join(sorted(n for n in sys.modules if {unwanted})))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return [m for m in p.stdout.strip().split(",") if m]


def test_the_library_imports_no_prefect_mlflow_or_app():
    """Import every module of platonic.core in a fresh interpreter: none pulls Prefect,
    MLflow, platonic.tasks or platonic.flows (what a notebook user gets)."""
    every_module = (
        "import importlib, pkgutil\n"
        "import platonic.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'platonic.core.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)"
    )
    app = "n.split('.')[0] in ('prefect', 'mlflow') or n.startswith(('platonic.tasks', 'platonic.flows'))"
    bad = _pulled_in(every_module, app)
    assert not bad, f"platonic.core pulled in: {','.join(bad)[:500]}"


def test_the_train_stage_launches_a_trainer_without_importing_torch():
    """The train stage's client side (train/launch.py, through the package) and the fork
    server's client import neither torch nor transformers: the flow's process starts a trainer
    at once (the demo's first trainer waited 10-13 s on that import: docs/benchmarks.md)."""
    client = (
        "from platonic.core.train import entry_command, relay_metrics, torchrun_command, train_in_subprocess\n"
        "from platonic.core.forkserver import trainer_server"
    )
    bad = _pulled_in(client, "n.split('.')[0] in ('torch', 'transformers')")
    assert not bad, f"the client side pulled in: {','.join(bad)[:300]}"


def _imported_modules(tree: ast.Module, package: list[str], modules: set[str]) -> set[str]:
    """The modules of `modules` an import statement of `tree` names, module-level or deferred
    into a function (a deferred import hides a cycle at import time, it does not remove it);
    `if TYPE_CHECKING:` blocks never run and do not count."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(a.name.replace("platonic.core", "platonic_core", 1) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            else:
                base = (node.module or "").replace("platonic.core", "platonic_core", 1)
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found & modules


def test_the_library_has_no_import_cycle():
    """No two modules of platonic_core import each other, directly or around a loop (the
    positives backends and the shard loop once did, through backends.py)."""
    files = {}
    for f in (ROOT / "platonic_core").rglob("*.py"):
        parts = f.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph = {}
    for name, f in files.items():
        package = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        graph[name] = _imported_modules(ast.parse(f.read_text()), package, set(files)) - {name}
    # depth-first search; a module met again while still on the path closes a cycle
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def walk(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n])
            elif n not in state:
                walk(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m)
    assert not cycles, "import cycles in platonic_core:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_ci_runs_the_readme_test_command():
    """.ci/run's first three tiers (install, lint, tests) are the README's test command, step
    for step (pip's -q aside), and the default tier is a bare `pytest`: what a contributor
    runs is what CI times; the served-stack tier follows it."""
    import re

    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"Run the tests \(what CI runs.*?```bash\n(.*?)\n```", readme, re.S)
    ci = (ROOT / ".ci" / "run").read_text()
    body = {name: re.search(rf"^{name}\(\) {{ (.*); }}$", ci, re.M).group(1) for name in ("install", "lint")}
    steps = [*body["install"].split(" && "), *body["lint"].split(" && ")]
    assert [s.replace(" -q", "") for s in steps] + ["pytest"] == command.split(" && ")
    tiers = re.findall(r"^tier (\S+) (.*)$", ci, re.M)
    assert tiers == [
        ("install", "install"),
        ("lint", "lint"),
        ("tests", "pytest"),
        ("stack-install", "stack_install"),
        ("stack", "pytest -m stack -n 0"),
    ]
