"""Files that live in the repo's top-level `sql/` and `configs/` folders.

In a checkout (or an editable install) they are read from there; a wheel ships them as the
data packages `platonic.sql` and `platonic.recipes` (see pyproject.toml).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_PACKAGES = {"sql": "platonic.sql", "configs": "platonic.recipes"}


def read_resource(folder: str, name: str) -> str:
    repo_file = Path(__file__).resolve().parents[1] / folder / name
    if repo_file.is_file():
        return repo_file.read_text()
    return resources.files(_PACKAGES[folder]).joinpath(name).read_text()
