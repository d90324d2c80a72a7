"""transformers imported by one thread at a time (platonic_core/model_stack.py): the race a
flow's threads ran into, reproduced in a fresh interpreter, and the rule that keeps every
import site behind the lock."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# two threads of a fresh interpreter, started together: the embed stage's import (our models,
# through features.py) and a training thread's model logging (mlflow.transformers). Imported
# plainly, the first failed with "cannot import name 'Gemma3TextConfig' from 'transformers'"
# in 6 of 6 runs here (transformers 5.25, mlflow 3.17): the CI failure of 2026-12-07
RACE = """
import threading
from platonic.core.model_stack import import_model_stack

errors = []
def run(f):
    try:
        f()
    except Exception as e:
        errors.append(repr(e))

def embed():
    import platonic.core.features  # noqa: F401

def log_model():
    import_model_stack("mlflow.transformers")

threads = [threading.Thread(target=run, args=(f,)) for f in (embed, log_model)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=240)
assert not any(t.is_alive() for t in threads), "an import hung"
print(errors or "ok")
"""


def test_two_threads_importing_models_and_mlflow_transformers_both_succeed():
    p = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "ok", p.stdout[-2000:]


def _imports_transformers(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "transformers" or node.module == "mlflow.transformers"
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "transformers" or a.name == "mlflow.transformers" for a in node.names)
    return False


def test_every_transformers_import_outside_models_follows_import_model_stack():
    """A function that imports transformers (or mlflow.transformers) calls
    `import_model_stack` first, in its own body; the models package takes the lock itself.
    A module-level import of transformers anywhere else is an error."""
    offenders = []
    for folder in ("platonic_core", "tasks", "flows"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("platonic_core", "models") or rel.name == "model_stack.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if _imports_transformers(node):
                    offenders.append(f"{rel}:{node.lineno} imports transformers at module level")
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                guarded_at = min(
                    (
                        n.lineno
                        for n in ast.walk(fn)
                        if isinstance(n, ast.Call)
                        and getattr(n.func, "id", getattr(n.func, "attr", None)) == "import_model_stack"
                    ),
                    default=None,
                )
                for n in ast.walk(fn):
                    if _imports_transformers(n) and (guarded_at is None or guarded_at > n.lineno):
                        offenders.append(f"{rel}:{n.lineno} ({fn.name}) imports transformers before import_model_stack")
    assert not offenders, "\n".join(offenders)
