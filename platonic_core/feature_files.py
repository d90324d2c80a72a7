"""What a feature file may be, told without reading it: `platonic align` checks its two
files here before it imports torch (features.py), so a mistyped path answers at once.
`features.load_features` makes the same checks first, with the same messages."""

from __future__ import annotations

from pathlib import Path

SUFFIXES = (".npz", ".npy", ".pt", ".parquet")


def unsupported(suffix: str) -> str:
    return f"unsupported feature format {suffix!r} (use .npz, .npy, .pt or .parquet)"


def check_feature_file(path: str | Path) -> Path:
    """`path` as a Path, or FileNotFoundError (not a file: missing, a folder) or ValueError
    (a suffix no reader takes), one line naming it."""
    path = Path(path)
    if path.is_dir():  # "no such feature file" sent the user looking for a typo
        raise FileNotFoundError(f"{path}: a folder, not a feature file (give one {', '.join(SUFFIXES)} file)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such feature file")
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: {unsupported(path.suffix)}")
    return path
