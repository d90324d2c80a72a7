"""What several command groups share: `fail` (one `error:` line and an exit code) and
`_reported_errors` (a run's errors mapped to exit codes 1 and 2)."""

from __future__ import annotations

import contextlib

import typer

from platonic.core.config import ConfigError

from .. import ctrl_c, runlog, services


def fail(msg: str, code: int = 2) -> None:
    """One `error:` line (naming the run's full log once a flow has written one) and exit."""
    typer.echo(f"error: {msg}{runlog.pointer()}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _reported_errors():
    """Recipe errors, unreadable sources, an output folder holding the user's files, a corrupt
    cached artifact under --only -> exit 2;
    missing cache, a failed stage, a full disk or a Prefect server gone mid-run -> exit 1; Ctrl-C
    or SIGTERM -> exit 130 or 143 (`ctrl_c`); one `error:` line each (Prefect has already logged a failed stage's
    traceback)."""
    from platonic.core.artifacts import ForeignFolderError
    from platonic.core.contract import CorruptCache, UpstreamNotCached
    from platonic.core.data.shard_paths import SourceError
    from platonic.core.durable import disk_full

    runlog.path = None  # a log an earlier command of this process wrote is not this one's
    try:
        with ctrl_c.handled():
            yield
    except typer.Exit:
        raise
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the stage stopped, its runs are closed KILLED
        said = f"{e}; " if str(e) else ""
        typer.echo(
            f"error: {ctrl_c.word()}: {said}the MLflow runs it opened are marked KILLED; "
            "every stage that finished is cached: rerun the command to go on",
            err=True,
        )
        services.exit_now(ctrl_c.exit_code())  # not Prefect's event drain at exit (a server gone with the Ctrl-C)
    except (ConfigError, SourceError, ForeignFolderError) as e:
        fail(str(e))
    except CorruptCache as e:  # the fix is the user's to run (a --force named in the line)
        fail(str(e))
    except UpstreamNotCached as e:
        fail(str(e), 1)
    except Exception as e:
        if (full := disk_full(e)) is not None:  # "no space left on device", naming the path
            fail(str(full), 1)
        if url := services.lost_prefect_server(e):
            typer.echo(
                f"error: the Prefect server at {url} stopped answering during the run ({type(e).__name__}: {e}). "
                "Every stage that finished is cached: rerun the command to finish (with no server up, it starts "
                f"a temporary one){runlog.pointer()}.",
                err=True,
            )
            services.exit_now(1)
        fail(f"the run failed: {type(e).__name__}: {e}", 1)
