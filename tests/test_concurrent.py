"""Trainings side by side (`train.parallel`, tasks/executor.py `_side_by_side`): the schedule
(inputs first, at most `parallel` trainings at once, the most samples first, the other stages
meanwhile in the flow's thread), what a failure or a stop does to the trainings running, and
that the trained bytes are those of a run one stage after another."""

from __future__ import annotations

import threading
import time

import pytest

from platonic.core import interrupt
from platonic.core.config import load_config
from platonic.core.stages.dag import upstream
from platonic.core.stages.pipeline import instances
from platonic.tasks.executor import _side_by_side


class Recorder:
    """Stand-in stage runs: a training sleeps in its pool thread, the rest return at once;
    every start and end is recorded with the thread it ran on."""

    def __init__(self, cfg, fail: str | None = None, seconds: float = 0.2):
        self.cfg, self.fail, self.seconds = cfg, fail, seconds
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, str]] = []  # (start|end, instance, thread)
        self.finished: list[str] = []
        self.done: dict[str, str] = {}  # what run_instances's `done` holds: by instance id

    def start(self, inst):
        def run():
            with self.lock:
                self.events.append(("start", inst.id, threading.current_thread().name))
            if inst.stage == "train":
                time.sleep(self.seconds)
            if inst.id == self.fail:
                raise RuntimeError(f"{inst.id} broke")
            with self.lock:
                self.events.append(("end", inst.id, threading.current_thread().name))
            return inst.id, None

        return run

    def finish(self, inst, m, state):
        self.finished.append(m)
        self.done[inst.id] = m

    def most_at_once(self, stage: str) -> int:
        now, most = 0, 0
        for kind, iid, _ in self.events:
            if iid.startswith(stage):
                now += 1 if kind == "start" else -1
                most = max(most, now)
        return most


@pytest.fixture
def demo():
    cfg = load_config("demo", [])
    return cfg, instances(cfg)


def test_side_by_side_runs_each_stage_after_its_inputs_and_trains_two_at_once(demo):
    cfg, insts = demo
    rec = Recorder(cfg)
    _side_by_side(cfg, insts, 2, rec.start, rec.finish, rec.done)
    assert sorted(rec.finished) == sorted(i.id for i in insts)  # every instance, once
    order = [iid for kind, iid, _ in rec.events if kind == "start"]
    at = {(kind, iid): n for n, (kind, iid, _) in enumerate(rec.events)}
    for inst in insts:  # an instance starts after every input it reads has ended
        for up in upstream(cfg, inst).values():
            assert at[("end", up)] < at[("start", inst.id)], f"{inst.id} started before its input {up} ended"
    assert rec.most_at_once("train:") == 2
    main = threading.current_thread().name
    assert {t for _, iid, t in rec.events if not iid.startswith("train:")} == {main}  # the rest: this thread
    assert all(t != main for _, iid, t in rec.events if iid.startswith("train:"))
    # the image model is ready after the world and starts beside the text stages; of the text
    # models, next-token (900 steps x 128, the most samples) starts first
    assert order.index("train:image") < order.index("positives")
    assert order.index("train:ntp") < min(order.index("train:good"), order.index("train:bad"))


def test_a_failed_training_starts_nothing_new_lets_the_running_one_finish_then_raises(demo):
    cfg, insts = demo
    rec = Recorder(cfg, fail="train:image", seconds=0.3)
    with pytest.raises(RuntimeError, match="train:image broke"):
        _side_by_side(cfg, insts, 2, rec.start, rec.finish, rec.done)
    started = {iid for kind, iid, _ in rec.events if kind == "start"}
    assert "train:ntp" in started and "train:ntp" in rec.finished  # running when image failed: finished, kept
    assert "evaluate" not in started and "embed:image" not in started  # nothing new after the failure


def test_a_stop_request_starts_nothing_new_and_raises_interrupted(demo):
    cfg, insts = demo
    rec = Recorder(cfg)
    inner = rec.start

    def start(inst):
        run = inner(inst)
        if inst.id != "train:ntp":
            return run

        def stop_then_run():
            interrupt.request_stop()  # what Ctrl-C's handler does while a training polls
            return run()

        return stop_then_run

    try:
        with pytest.raises(interrupt.Interrupted, match="stopped before"):
            _side_by_side(cfg, insts, 2, start, rec.finish, rec.done)
    finally:
        interrupt.clear()
    assert "train:ntp" in rec.finished
    assert "evaluate" not in {iid for _, iid, _ in rec.events}


@pytest.mark.e2e  # a real flow: four training processes
def test_trainings_side_by_side_train_the_same_bytes_as_one_after_another(tiny_run, tmp_path):
    """configs/tiny.yaml (1 thread) with `train.parallel: 2`: every training in a process of
    its own, two at once. Every stage's artifact is byte-identical to the shared run's, which
    trained in the flow's process, one model after another, and each training's losses reach
    its MLflow run (relayed from the process) as the in-process run logged them."""
    from mlflow.tracking import MlflowClient

    from platonic.flows.pipeline import pipeline

    _, ref = tiny_run
    cfg = load_config("configs/tiny.yaml", [f"out_dir={tmp_path}", "train.parallel=2"])
    res = pipeline(cfg.model_dump(mode="json"))
    assert {k: v["digest"] for k, v in res["stages"].items()} == {k: v["digest"] for k, v in ref["stages"].items()}

    def losses(results: dict, model: str) -> list[tuple[int, float]]:
        client = MlflowClient(results["tracking_uri"])
        history = client.get_metric_history(results["stages"][f"train:{model}"]["run_id"], "train/loss")
        return sorted((m.step, m.value) for m in history)

    for model in cfg.train.models:
        assert losses(res, model) == losses(ref, model) != [], model


def test_the_same_upstream_logged_from_several_threads_is_one_dataset_every_run_reads(tmp_path):
    """Side by side, positives (the flow's thread) and train:image (a pool thread) log the
    `world` artifact as a dataset input at the same moment: MLflow's SQL store looked the
    dataset up, then inserted it, and one of the two failed the demo with `UNIQUE constraint
    failed: datasets...`. Eight threads now log it to eight runs: one dataset, eight inputs."""
    from concurrent.futures import ThreadPoolExecutor

    from mlflow.tracking import MlflowClient

    from platonic.tasks.tracking import log_input

    c = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = c.create_experiment("e", artifact_location=(tmp_path / "a").as_uri())
    runs = [c.create_run(exp).info.run_id for _ in range(8)]
    digest = "a7290c130a71cb42c9a9fd9f984ab7dd9a6a7290c130a71cb42c9a9fd9f984ab"
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda r: log_input(c, r, "world", digest, str(tmp_path / "w"), {}, {"scenes": 1}), runs))
    for r in runs:
        (ds,) = c.get_run(r).inputs.dataset_inputs
        assert ds.dataset.name == "world"


def test_a_dataset_insert_lost_to_another_writer_is_retried_once(monkeypatch):
    """Another process can insert the same dataset between MLflow's lookup and its insert (no
    lock of ours reaches it): that unique-key error is retried once, and the retry finds the
    row; any other error is raised as it came."""
    from mlflow.exceptions import MlflowException

    from platonic.tasks.tracking import log_input

    class Client:
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def log_inputs(self, run_id, datasets):
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)

    lost = MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, datasets.name")
    c = Client([lost])
    log_input(c, "r", "world", "d" * 64, "/w", {}, {})
    assert c.calls == 2
    pg = Client([MlflowException('duplicate key value violates unique constraint "datasets_pk"')])
    log_input(pg, "r", "world", "d" * 64, "/w", {}, {})
    assert pg.calls == 2
    other = Client([MlflowException("RESOURCE_DOES_NOT_EXIST: run r")])
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        log_input(other, "r", "world", "d" * 64, "/w", {}, {})
    assert other.calls == 1
