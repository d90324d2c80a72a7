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
    _side_by_side(cfg, insts, 2, rec.start, rec.finish)
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
        _side_by_side(cfg, insts, 2, rec.start, rec.finish)
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
            _side_by_side(cfg, insts, 2, start, rec.finish)
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
