"""The `platonic` command.

    platonic --version                           the installed package's version
    platonic demo [--json]                       the whole DAG on the synthetic world
    platonic run CONFIG [--set k=v ...] [--only S | --from S] [--force S ...] [--json]
    platonic stages [CONFIG]                     what each stage reads and writes
    platonic lineage RUN_ID [--json]             evaluation run -> ... -> ingested source
    platonic align A B [--metric M] [--k 10]     alignment between two feature files
    platonic compare CONFIG [--json]             text models x vision encoders x eval sets
    platonic match CONFIG [--json]               pair-free classification: class names <-> image clusters
    platonic ablate RECIPE [--quick] [--json]    the Table-7 grid over seeds (configs/table7.yaml)
    platonic caption RECIPE [--set k=v] [--json] captions through one map (configs/caption_world.yaml)
    platonic table EXPERIMENT                    the grid of the latest ablation, read from MLflow
    platonic forecast EXPERIMENT --model M       scaling law: predict a run the fit never saw
    platonic stand-ins [DIR]                     tiny local models for configs/compare_tiny.yaml
    platonic ingest SOURCE... --format F [--out DIR] [--json]   a real corpus -> Parquet + DuckDB
    platonic corpus stats [--dir DIR] [--json]   texts per image, lengths, sources, quarantine
    platonic audit --corpus PATH --eval SPEC ... contamination audit: exact, near-duplicate, embedding
    platonic server [--stop] [--out-dir D]       the store's own Prefect server, for warm reruns
    platonic verify [--out-dir DIR]             rehash every cached artifact (not the size+mtime fast path)
    platonic export RUN_ID DEST                  a trained text encoder as a Hugging Face folder
    platonic serve-chat --model DIR --port P     a loopback OpenAI-compatible chat server (tiny local models)

The store (out_dir) is --out-dir, else $PLATONIC_OUT_DIR, else the recipe's (.platonic, relative
to the current folder); every command that uses one names it on stderr (`store: PATH`).
Bad recipes, overrides or stage names print one `error:` line and exit with code 2.
Prefect, MLflow and torch are imported lazily: a command checks its arguments, files, recipe
and stage names first, so a mistake answers in well under a second (tests/test_cli_mistakes.py,
docs/benchmarks.md "A user's mistake").

This module is the wiring alone: the commands live in `flows/commands/`, one module per group
(run, data, showcases, tools; `common` holds what several share), and are registered here in
the order `platonic --help` lists them.
"""

from __future__ import annotations

import gc
import importlib.metadata

import typer

from .commands import data, run, showcases, tools
from .commands.common import _reported_errors, fail
from .commands.run import print_summary

__all__ = ["app", "main", "fail", "_reported_errors", "print_summary"]

# `\b` keeps these lines as written (click does not wrap them): each must fit 80 columns
# with click's 4-space indent (tests/test_cli_help.py)
EXAMPLES = """Examples:

\b
  platonic demo                                     the whole synthetic study
  platonic run configs/demo.yaml --set world.seed=1 another world, rest cached
  platonic run configs/demo.yaml --only evaluate    one stage on the cache
  platonic server                                   the store's Prefect server
  platonic ablate configs/table7.yaml --quick       Table 7 over seeds, small
  platonic lineage RUN_ID                           where a score came from
  platonic stages                                   what each stage reads

From Python: `from platonic.flows.api import run; run("demo", sets=["world.seed=1"])`."""

# plain help (not rich): flags read as flags, not `--json <bool>`
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Proving and improving the Platonic Representation Hypothesis with JEPAs.",
    epilog=EXAMPLES,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"platonic {importlib.metadata.version('platonic')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


app.command()(run.demo)
app.command()(run.run)
app.command()(showcases.compare)
app.command()(showcases.match)
app.command()(run.ablate)
app.command()(showcases.caption)
app.command()(run.table)
app.command()(run.forecast)
app.command()(data.audit)
app.command("stand-ins")(showcases.stand_ins)
app.command()(data.ingest)
app.add_typer(data.corpus_app, name="corpus")
app.command()(run.stages)
app.command()(tools.server)
app.command()(tools.export)
app.command()(tools.lineage)
app.command()(tools.verify)
app.command()(tools.align)
app.command("serve-chat")(tools.serve_chat)


def main() -> None:
    try:
        app()
    finally:
        # the command is done: the objects its imports made (torch, transformers, MLflow,
        # Prefect: millions) stay out of the collections Python runs while it shuts down,
        # which took 1.5-3 s a command (docs/benchmarks.md); atexit handlers still run
        gc.freeze()


if __name__ == "__main__":
    main()
