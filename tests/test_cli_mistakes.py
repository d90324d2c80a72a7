"""A user's mistake answers at once (issue 40 item 5): every command checks its arguments,
files and recipe before it imports torch, Prefect, MLflow or transformers, and refuses with
one `error:` line. Not timed (benchmarks/bench_cli_errors.py times them, docs/benchmarks.md):
what is checked is which heavy modules the refusal imported, in a process where nothing else
imported them. The test process cannot tell (conftest imports torch), so ONE subprocess runs
the whole table in-process (typer's CliRunner), recording after each case the heavy modules
it brought in."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_table

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
RUN_ID = "0123456789abcdef0123456789abcdef"  # well formed, in no store
# what a refusal must not import (top-level module names); numpy and pyarrow may be imported
HEAVY = {
    "torch", "transformers", "tokenizers", "safetensors", "prefect", "mlflow", "duckdb", "polars", "sklearn",
    "scipy", "matplotlib", "datasets", "faiss", "huggingface_hub", "pyarrow", "numpy",
}  # fmt: skip

# (id, argv, exit code, what the error line says); a None line: the parser's usage error
CASES = [
    ("help", ["--help"], 0, None),
    ("align-missing", ["align", "missing.npy", "b.npy"], 2, "missing.npy: no such feature file"),
    ("align-missing-second", ["align", "b.npy", "missing.npy"], 2, "missing.npy: no such feature file"),
    ("align-folder", ["align", "folder", "b.npy"], 2, "folder: a folder, not a feature file"),
    ("align-folder-second", ["align", "b.npy", "folder"], 2, "folder: a folder, not a feature file"),
    ("align-format", ["align", "notes.txt", "b.npy"], 2, "notes.txt: unsupported feature format '.txt'"),
    ("align-metric", ["align", "b.npy", "b.npy", "--metric", "nope"], 2, None),
    ("run-missing", ["run", "missing.yaml"], 2, "no such recipe file"),
    ("run-set-key", ["run", str(TINY), "--set", "world.sed=1"], 2, "unknown key 'world.sed'"),
    ("run-set-value", ["run", str(TINY), "--set", "world.seed=abc"], 2, "'world.seed'"),
    ("run-set-model", ["run", str(TINY), "--set", "evaluate.text_models=[zzz]"], 2, "zzz"),
    ("run-image-as-text", ["run", str(TINY), "--set", "evaluate.text_models=[image]"], 2, "'image' is an image_jepa"),
    ("run-empty-recipe", ["run", "blank.yaml"], 2, "blank.yaml: the recipe is empty (no keys)"),
    ("run-only", ["run", str(TINY), "--only", "nope"], 2, "unknown stage 'nope'"),
    ("run-from", ["run", str(TINY), "--from", "nope"], 2, "unknown stage 'nope'"),
    ("run-force", ["run", str(TINY), "--force", "nope"], 2, "unknown stage 'nope'"),
    ("run-only-from", ["run", str(TINY), "--only", "train", "--from", "world"], 2, "cannot be combined"),
    ("run-uncached", ["run", str(TINY), "--only", "evaluate", "--out-dir", "empty"], 1, "evaluate reads stages that"),
    ("run-yaml", ["run", "broken.yaml"], 2, "broken.yaml: not valid YAML"),
    ("run-field", ["run", "typo.yaml"], 2, "typo.yaml: unknown key 'seeed'"),
    ("ingest-missing", ["ingest", "missing.jsonl", "--format", "jsonl"], 2, "missing.jsonl: no such file or folder"),
    ("ingest-no-shards", ["ingest", "folder", "--format", "jsonl"], 2, "folder: no jsonl shards"),
    ("ingest-format", ["ingest", "data.jsonl", "--format", "nope"], 2, None),
    ("ingest-set", ["ingest", "data.jsonl", "--format", "jsonl", "--set", "ingest.nope=1"], 2, "'ingest.nope'"),
    ("export-run-id", ["export", "not/a-run", "dest", "--out-dir", "store"], 2, "no MLflow run 'not/a-run' in sqlite:"),
    ("export-dest-file", ["export", RUN_ID, "b.npy", "--out-dir", "store"], 2, "b.npy: not a folder"),
    ("export-dest-full", ["export", RUN_ID, "folder", "--out-dir", "store"], 2, "folder: not empty"),
    # issue 43: a DEST below a file was a NotADirectoryError traceback from save_pretrained
    (
        "export-dest-under-file",
        ["export", RUN_ID, "b.npy/model", "--out-dir", "store"],
        2,
        "b.npy is a file, not a folder",
    ),
    ("export-no-store", ["export", RUN_ID, "dest", "--out-dir", "nostore"], 2, "no store at"),
    ("lineage-run-id", ["lineage", "a run", "--out-dir", "store"], 1, "no MLflow run 'a run' in sqlite:"),
    ("lineage-run-id-slash", ["lineage", "../x", "--out-dir", "store"], 1, "no MLflow run '../x'"),
    ("lineage-no-store", ["lineage", RUN_ID, "--out-dir", "nostore"], 2, "no store at"),
]


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory) -> dict:
    """Each case's exit code, output and the heavy modules it imported: one process, in a
    folder holding the files the cases name."""
    root = tmp_path_factory.mktemp("mistakes")
    np.save(root / "b.npy", np.zeros((4, 3), np.float32))
    (root / "notes.txt").write_text("not features")
    (root / "folder").mkdir()
    (root / "folder" / "notes.txt").write_text("mine")
    (root / "data.jsonl").write_text('{"image_id": "a", "text": "a cat"}\n')
    (root / "broken.yaml").write_text("world: [unclosed\n")
    (root / "typo.yaml").write_text(TINY.read_text() + "\nseeed: 1\n")
    (root / "blank.yaml").write_text("# nothing set yet\n")
    (root / "store" / "artifacts").mkdir(parents=True)  # a store (no MLflow database in it)
    env = {k: v for k, v in os.environ.items() if k not in ("PLATONIC_OUT_DIR", "MLFLOW_TRACKING_URI")}
    out = cli_table([c[:2] for c in CASES], root, env, heavy=HEAVY)
    out["root"] = str(root)
    return out


def test_the_cli_itself_imports_none_of_them(mistakes):
    assert mistakes["cli"] == []


@pytest.mark.parametrize("cid,args,code,line", CASES, ids=[c[0] for c in CASES])
def test_a_mistake_is_refused_before_heavy_imports(mistakes, cid, args, code, line):
    r = mistakes[cid]
    assert r["imported"] == [], f"{cid} imported {r['imported']} before refusing"
    assert r["code"] == code, r
    if code == 0:
        return
    lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
    if line is None:  # the parser's refusal of a choice (its usage text, then one Error: line)
        assert "Invalid value" in r["stderr"] and not r["stdout"], r
        return
    # one error line; before it, at most the line naming the store (ingest, export, lineage)
    assert lines and lines[-1].startswith("error: ") and line in lines[-1], r
    assert all(ln.startswith("store: ") for ln in lines[:-1]), r
    if args[0] in ("run", "align"):
        assert len(lines) == 1, r
    assert not r["stdout"], r


def test_nothing_was_written_where_the_mistakes_pointed(mistakes):
    """A refused command leaves no MLflow database in the store, no export folder."""
    root = Path(mistakes["root"])
    assert sorted(p.name for p in (root / "store").iterdir()) == ["artifacts"]
    assert not any((root / p).exists() for p in ("dest", ".platonic", "empty"))


def test_the_run_id_form_is_mlflows():
    """The CLI's check of a RUN_ID's form (before MLflow is imported) refuses exactly what
    MLflow's own client refuses before a lookup."""
    from mlflow.utils.validation import _RUN_ID_REGEX

    from platonic.tasks.run_ids import RUN_ID as FORM

    assert FORM.pattern == _RUN_ID_REGEX.pattern and FORM.flags == _RUN_ID_REGEX.flags


def test_check_sources_refuses_what_resolve_sources_does_offline(tmp_path):
    """`platonic ingest`'s early check: a local path's refusals, word for word; hub and URI
    sources are left to the reading (no network here)."""
    from platonic.core.data.readers import SourceError, resolve_sources
    from platonic.core.data.shard_paths import check_sources

    (tmp_path / "empty").mkdir()
    (tmp_path / "caps.jsonl").write_text("{}\n")
    for paths, fmt in (
        ([str(tmp_path / "nope.parquet")], "recap"),
        ([str(tmp_path / "empty")], "recap"),
        ([str(tmp_path / "caps.jsonl"), str(tmp_path / "nope-*.jsonl")], "jsonl"),
        ([], "jsonl"),
        ([str(tmp_path / "caps.jsonl")], "nope"),
    ):
        with pytest.raises(SourceError) as want:
            resolve_sources(paths, fmt)
        with pytest.raises(SourceError, match=f"^{re.escape(str(want.value))}$"):
            check_sources(paths, fmt)
    check_sources([str(tmp_path / "caps.jsonl"), "hf://datasets/org/nope", "memory://nothing/x.jsonl"], "jsonl")
    check_sources([str(tmp_path / "caps.jsonl")], "jsonl", ["caps*"])
    with pytest.raises(SourceError, match=r"matching \['other\*'\]"):
        check_sources([str(tmp_path / "caps.jsonl"), str(tmp_path)], "jsonl", ["other*"])
