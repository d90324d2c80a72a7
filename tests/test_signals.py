"""Signals to real runs of configs/tiny.yaml, as a user's terminal, a scheduler or the
kernel sends them: SIGKILL at every stage boundary, then a rerun reuses what was committed
and gives the same results; Ctrl-C (SIGINT) and SIGTERM during training stop the run within
seconds with one error line, mark its MLflow runs KILLED and keep a training state a rerun
resumes from. (Split from test_faults.py so that two test workers share the fault tests.)

    pytest tests/test_signals.py        (also part of the default run: -m faults)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, executed, run_tiny, scores
from mlflow.tracking import MlflowClient

from platonic.core.artifacts import Manifest, committed

pytestmark = [pytest.mark.faults, pytest.mark.e2e]


def _cli_run(out: Path, sets: list[str] = (), stderr: int = subprocess.DEVNULL) -> subprocess.Popen:
    """`platonic run` on the tiny recipe (with `sets`) as a user starts it, against the
    session's Prefect server (not a temporary one: that start is not what is tested here)."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_API_URL": PREFECT_API_URL.value()}
    args = [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", f"out_dir={out}"]
    return subprocess.Popen(
        [*args, *(a for s in sets for a in ("--set", s))],
        cwd=out.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        start_new_session=True,  # its own process group: a Ctrl-C or a SIGKILL reaches the run and its children
    )


# in execution order, one per kind of work (generated data, resumable positives, training,
# scoring); each kill lands just after that stage's artifact is committed, while the
# next stage runs
BOUNDARIES = ["world", "positives", "train:good", "ceiling"]


def test_sigkill_at_every_stage_boundary_then_rerun_gives_the_same_results(tiny_run, tmp_path):
    reference = tiny_run[1]  # the same recipe, run once by the session
    out = tmp_path / "out"
    out.mkdir()
    for boundary in BOUNDARIES:
        store = out / "artifacts" / boundary.replace(":", "/")
        proc = _cli_run(out)
        try:
            # committed: a folder under its final name; a staging folder (`.<key>.tmp-…`) holds
            # its manifest a moment before the rename, and a kill there commits nothing
            _wait_for(proc, f"{boundary} committed", lambda store=store: committed(store)[0])
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    again = run_tiny(out)
    assert not set(BOUNDARIES) & executed(again)  # what was committed before a kill is reused
    assert scores(again) == scores(reference)
    assert scores(json.loads((Path(again["output_dir"]) / "results.json").read_text())) == scores(reference)


def _cli_run_reading_stderr(out: Path, sets: list[str]) -> tuple[subprocess.Popen, list[str]]:
    """`_cli_run` with its stderr collected line by line (tqdm's carriage returns split lines
    too) by a thread while it runs."""
    import threading

    proc = _cli_run(out, sets, stderr=subprocess.PIPE)
    lines: list[str] = []

    def read() -> None:
        buf = ""
        for ch in iter(lambda: proc.stderr.read(1), ""):
            if ch in "\r\n":
                lines.append(buf)
                buf = ""
            else:
                buf += ch

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _wait_for(proc: subprocess.Popen, what: str, until, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.02)


STOPPABLE = ["train.models.good.steps=600", "train.models.good.checkpoint_every=800"]  # a checkpoint every 50 steps


def _signal_during_training(out: Path, send) -> tuple[int, list[str], float, Path]:
    """Start the tiny run (STOPPABLE), `send(pid)` once train:good has written a checkpoint:
    (exit code, stderr lines, seconds from the signal to the exit, the checkpoints folder)."""
    ckpts = out / "checkpoints" / "train-good"
    proc, lines = _cli_run_reading_stderr(out, STOPPABLE)
    try:
        _wait_for(proc, "a training checkpoint", lambda: any(ckpts.glob("*/step_*")))
        send(proc.pid)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return rc, lines, time.monotonic() - t0, ckpts


def _stopped_at(ckpts: Path) -> int:
    (state,) = ckpts.glob("*")
    return max(json.loads((s / "state.json").read_text())["step"] for s in state.glob("step_*"))


def _runs(out: Path) -> tuple[MlflowClient, list]:
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    return c, c.search_runs([e.experiment_id for e in c.search_experiments()])


def _statuses(out: Path, old: frozenset[str] = frozenset()) -> tuple[MlflowClient, dict[tuple[str, str], str]]:
    """(client, {(run name, stage instance or "parent"): status}) of every MLflow run in `out`
    but the `old` ones (run ids: what the copied store held before the test)."""
    c, runs = _runs(out)
    new = [r for r in runs if r.info.run_id not in old]
    return c, {(r.info.run_name, r.data.tags.get("platonic.stage_instance", "parent")): r.info.status for r in new}


def _run_ids(out: Path) -> frozenset[str]:
    return frozenset(r.info.run_id for r in _runs(out)[1])


def _goods(out: Path) -> set[Path]:
    """train:good's committed artifact folders in `out`."""
    return set(committed(out / "artifacts" / "train" / "good")[0])


def _stopped_run(tiny_copy, tmp_path: Path) -> tuple[Path, frozenset[str], set[Path]]:
    """A copy of the session's tiny store (every stage cached: the run under test trains
    train:good with STOPPABLE's budget alone): (out_dir, its MLflow run ids, its train:good)."""
    out = tiny_copy(tmp_path / "out")
    return out, _run_ids(out), _goods(out)


def test_sigint_during_training_stops_the_run_keeps_its_checkpoint_and_marks_runs_killed(tiny_copy, tmp_path):
    """Ctrl-C (SIGINT to the CLI's process group) while train:good trains: exit 130 within
    seconds, one `error: interrupted` line, the parent run and the train:good run KILLED (read
    with the real MlflowClient), the training state kept. A rerun resumes from it; Ctrl-C
    twice during that rerun exits at once. A last run finishes from the checkpoint."""
    out, old, goods = _stopped_run(tiny_copy, tmp_path)
    rc, lines, took, ckpts = _signal_during_training(out, lambda pid: os.killpg(pid, signal.SIGINT))
    assert rc == 130, lines[-20:]
    assert took < 30
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: interrupted: train:good stopped at step"), lines[-20:]
    stopped_at = _stopped_at(ckpts)
    assert 50 <= stopped_at < 600
    assert _goods(out) == goods  # nothing committed for it

    c, status = _statuses(out, old)
    assert status.pop(("train:good", "train:good")) == "KILLED"
    parents = [s for (name, inst), s in status.items() if inst == "parent"]
    assert parents == ["KILLED"]
    assert set(status.values()) <= {"FINISHED", "KILLED"}  # none RUNNING or FAILED (upstream: cache hits)

    # the rerun resumes; Ctrl-C twice exits at once, with the runs it leaves closed by the next run
    proc, lines = _cli_run_reading_stderr(out, STOPPABLE)
    try:
        _wait_for(proc, "train:good resuming", lambda: any("train:good" in ln and "running" in ln for ln in lines))
        left_to_train = f"/{600 - stopped_at} ["  # tqdm counts the steps left: it resumed there
        _wait_for(proc, "training steps", lambda: any(left_to_train in ln for ln in lines))
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for(proc, "the first Ctrl-C's line", lambda: any("interrupted: stopping the run" in ln for ln in lines))
        os.killpg(proc.pid, signal.SIGINT)
        t1 = time.monotonic()
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 130 and time.monotonic() - t1 < 5, lines[-20:]
    assert "error: interrupted twice: exiting now" in lines, lines[-20:]

    again = run_tiny(out, tuple(STOPPABLE))
    (new,) = _goods(out) - goods
    m = Manifest.read(new)
    assert m.stats["resumed_from_step"] >= stopped_at
    assert "train:good" in executed(again) and again["models"]["good"]["train_run_id"] == m.producer_run_id
    assert not list(ckpts.glob("*"))  # committed: the training state is gone
    left = c.search_runs([e.experiment_id for e in c.search_experiments()], "attributes.status = 'RUNNING'")
    assert left == []  # the runs the double Ctrl-C left RUNNING were marked KILLED by the last run


def test_sigterm_during_training_stops_the_run_like_ctrl_c_and_exits_143(tiny_copy, tmp_path):
    """Issue 43 (row 43.7): SIGTERM to the CLI's process alone (what a scheduler, a container
    stop or a Prefect worker's cancel sends) while train:good trains. Before: exit 143 at once,
    no line, the runs FAILED, nothing saved past the last periodic checkpoint. Now as Ctrl-C:
    one `error: terminated:` line, exit 143, the runs KILLED, the state saved at the stop, and
    a rerun resumes from it."""
    out, old, goods = _stopped_run(tiny_copy, tmp_path)
    rc, lines, took, ckpts = _signal_during_training(out, lambda pid: os.kill(pid, signal.SIGTERM))
    assert rc == 143, lines[-20:]
    assert took < 30
    assert any("terminated (SIGTERM): stopping the run" in ln for ln in lines), lines[-20:]  # after tqdm's bar
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: terminated: train:good stopped at step"), lines[-20:]
    stopped_at = _stopped_at(ckpts)
    assert 50 <= stopped_at < 600 and f"stopped at step {stopped_at} of 600" in errors[0]  # saved at the stop

    _, status = _statuses(out, old)
    assert status.pop(("train:good", "train:good")) == "KILLED"
    assert [s for (name, inst), s in status.items() if inst == "parent"] == ["KILLED"]
    assert set(status.values()) <= {"FINISHED", "KILLED"}  # none RUNNING or FAILED (upstream: cache hits)

    again = run_tiny(out, tuple(STOPPABLE))
    (new,) = _goods(out) - goods
    m = Manifest.read(new)
    assert m.stats["resumed_from_step"] == stopped_at
    assert "train:good" in executed(again)
