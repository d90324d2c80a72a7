"""Shard-level fan-out through an existing engine: a Prefect task runner on Dask.

`mapper_for(cfg.fanout)` returns None for `fanout.engine: inline` (the stage's own loop), or a
`map(fn, calls) -> results` that submits one Prefect task run per call to a
`prefect_dask.DaskTaskRunner`: a LocalCluster of `fanout.workers` processes, or the Dask
scheduler at `fanout.address` / PLATONIC_DASK_ADDRESS. Results come back in call order, so
a stage's output never depends on scheduling (tests/test_fanout.py checks it is
byte-identical to the inline run). Workers on other machines must see the same out_dir
(a shared filesystem), as the stage reads and writes artifacts by path.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

Mapper = Callable[[Callable[..., Any], Sequence[tuple]], list]


def dask_runner(fanout):
    """The DaskTaskRunner a recipe's `fanout` section describes."""
    from prefect_dask import DaskTaskRunner

    address = fanout.address or os.environ.get("PLATONIC_DASK_ADDRESS")
    if address:
        return DaskTaskRunner(address=address)
    # processes, one thread each: shard work is CPU-bound Python/Arrow code
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": fanout.workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": ":0",
        }
    )  # a free port: never clash


def mapper_for(fanout) -> Mapper | None:
    """The recipe's `fanout` section as a map function (None: inline)."""
    if fanout.engine == "inline":
        return None

    def map_on_dask(fn: Callable[..., Any], calls: Sequence[tuple]) -> list:
        if not calls:
            return []
        sig = inspect.signature(fn)
        shard_task = task(fn, name=fn.__name__, cache_policy=NO_CACHE)
        with dask_runner(fanout) as runner:
            futures = [runner.submit(shard_task, parameters=dict(sig.bind(*args).arguments)) for args in calls]
            return [f.result() for f in futures]

    return map_on_dask
