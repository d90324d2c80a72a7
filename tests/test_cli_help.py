"""What a user sees first: `--version`, `--help`'s command list and metavars, choices refused
by the parser, and the demo's table in a 100-column terminal."""

from __future__ import annotations

import importlib.metadata
import re
import typing

import pytest
from typer.testing import CliRunner

from platonic.flows.cli import app
from platonic.flows.commands import run, tools

COMMANDS = [
    ["demo"], ["run"], ["compare"], ["match"], ["ablate"], ["caption"], ["table"], ["forecast"], ["audit"],
    ["stand-ins"], ["ingest"], ["stages"], ["server"], ["export"], ["lineage"], ["align"], ["serve-chat"],
    ["corpus", "stats"],
]  # fmt: skip


def invoke(*args: str, columns: int = 80):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


def test_version_prints_the_installed_version():
    r = invoke("--version")
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"platonic {importlib.metadata.version('platonic')}"


def test_command_list_is_not_cut_off():
    r = invoke("--help")
    assert r.exit_code == 0, r.output
    listed = r.output.split("Commands:")[1].split("Examples:")[0]
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    assert len(names) == 19 and "serve-chat" in names and "corpus" in names, listed
    assert "..." not in listed and "…" not in listed, listed


@pytest.mark.parametrize("command", [[], *COMMANDS], ids=lambda c: " ".join(c) or "platonic")
def test_help_fits_80_columns_even_in_a_wide_terminal(command):
    """Issue 44 item 4: `platonic --help`'s examples (kept as written, not wrapped) ran to 104
    columns; every --help line now fits 80, however wide the terminal."""
    r = invoke(*command, "--help", columns=200)
    assert r.exit_code == 0, r.output
    assert not [line for line in r.output.splitlines() if len(line) > 80], r.output


def test_run_help_lists_the_stage_names_its_stage_options_take():
    """Issue 44 item 4: --only, --from and --force name the stages they take, the pipeline's
    own (spelled in the CLI so --help imports no stage module: they must not drift)."""
    from platonic.core.stages.pipeline import SPECS

    assert run.STAGES == tuple(SPECS)
    r = invoke("run", "--help", columns=200)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    for option in ("--only", "--from", "--force"):
        said = flat.split(f"{option} STAGE", 1)[1].split(" --", 1)[0]
        assert all(re.search(rf"\b{s}\b", said) for s in SPECS), (option, said)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_options_show_a_name_not_a_python_type(command):
    r = invoke(*command, "--help")
    assert r.exit_code == 0, r.output
    options = [line for line in r.output.splitlines() if line.lstrip().startswith("--")]
    assert options and not [o for o in options if "<list[" in o], options


def test_align_choices_are_the_library_metrics_and_clamps():
    """Spelled in the CLI (its --help must not import torch); they must not drift."""
    from platonic.core.metrics import CLAMPS, METRICS

    assert typing.get_args(tools.Metric) == METRICS
    assert typing.get_args(tools.Clamp) == CLAMPS


@pytest.mark.parametrize(
    "args,choices",
    [
        (["align", "a.npy", "b.npy", "--metric", "bogus"], typing.get_args(tools.Metric)),
        (["align", "a.npy", "b.npy", "--clamp", "bogus"], ("mean", "exact", "none")),
        (["align", "a.npy", "b.npy", "--layers", "bogus"], ("best", "last")),
        (["align", "a.npy", "b.npy", "--backend", "bogus"], ("dense", "faiss")),
        (["ingest", "x.jsonl", "--format", "bogus"], ("recap", "wds", "coco", "jsonl")),
    ],
)
def test_a_value_outside_the_choices_is_refused_by_the_parser(args, choices):
    r = invoke(*args)
    assert r.exit_code == 2, r.output  # a usage error, before any file is read
    assert "'bogus' is not one of" in r.output and all(f"'{c}'" in r.output for c in choices), r.output
    shown = invoke(args[0], "--help", columns=200).output
    assert "<" + "|".join(choices) + ">" in shown, shown  # and --help lists them


def demo_results() -> dict:
    models = {
        name: {
            "kind": kind,
            "views": views,
            "mutual_knn": score,
            "ci95": [score - 0.008, score + 0.009],
            "layer_a": 0,
            "layer_b": 3,
            "fraction_of_ceiling": score / 0.7619,
            "procrustes": {"t2i_R@1": 0.088, "i2t_R@1": 0.084, "heldout_residual": 1.086},
            "train_run_id": f"{i}c3a52edf9b847ad995d83683c9e7688",
        }
        for i, (name, kind, views, score) in enumerate(
            [
                ("good", "text_jepa", "good", 0.1344),
                ("ntp", "causal_lm", "documents", 0.0853),
                ("bad", "text_jepa", "bad", 0.0489),
            ]
        )
    }
    return {
        "models": models,
        "ordering": list(models),
        "k": 10,
        "image_model": "image",
        "n": 1024,
        "chance": 0.0098,
        "ceilings": {"attributes": 0.15, "learned": 0.7619},
        "output_dir": "/tmp/.platonic/runs/7fa66013937f4ad0ab61740468ae69ed",
        "run_id": "7fa66013937f4ad0ab61740468ae69ed",
        "experiment_id": "1",
        "tracking_uri": "sqlite:////tmp/.platonic/mlflow.db",
    }


def test_demo_table_fits_100_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the table keeps its own width
    run.print_summary(demo_results())
    out = capsys.readouterr().out.splitlines()
    table = out[: next(i for i, line in enumerate(out) if line.startswith("train runs:"))]
    assert max(len(line) for line in table) <= 100, "\n".join(table)
    for name, score, lo, hi in [("good", "0.1344", "0.1264", "0.1434"), ("ntp", "0.0853", "0.0773", "0.0943")]:
        row = next(line for line in table if re.match(rf"{name}\s", line))
        assert f"{score} [{lo}, {hi}]" in row, row  # one line per model: no cell wrapped
