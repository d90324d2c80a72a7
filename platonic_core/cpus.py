"""How many CPUs this process may use, for torch's intra-op threads.

`os.cpu_count()` is the machine's; a process pinned to fewer cores (taskset, Slurm, a
container's cpuset) or under a CPU quota (cgroup `cpu.max`, Kubernetes limits) that starts
that many threads makes them wait on each other. A recipe's `threads: auto` resolves here.
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path

AUTO = "auto"


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup quota allows (v2 `cpu.max`, v1 `cfs_quota_us / cfs_period_us`); None
    without a quota."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """min(CPUs in this process's affinity mask, the cgroup quota rounded up), at least 1."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if (quota := _cgroup_quota(cgroup_root)) is not None:
        n = min(n, math.ceil(quota))
    return max(1, n)


def resolve_threads(threads: int | str) -> int:
    """A recipe's `threads`: a count, or `auto` (`usable_cpus()`)."""
    return usable_cpus() if threads == AUTO else int(threads)


# libgomp (torch's OpenMP on Linux) keeps a waiting thread spinning for 300k iterations by
# default (OMP_WAIT_POLICY unset). Alone on its cores that is harmless; with another
# process on them (two runs at once, a test suite beside a run) the spinning threads take
# the cores the working ones need. Measured here (the demo's good-view JEPA, 2 threads each,
# two processes on 2 cores): 840 ms/step at the default, 200 ms/step at 1,000 spins, solo
# unchanged (106-108 ms/step); OMP_WAIT_POLICY=PASSIVE gave 185 ms/step pairs, +9% solo.
SPIN_DEFAULTS = {"GOMP_SPINCOUNT": "1000"}


def short_openmp_spins(environ: MutableMapping[str, str] | None = None) -> None:
    """Short OpenMP spin-waits for this process and those it starts (`environ`: os.environ),
    unless the user set a wait policy. Takes effect where OpenMP is not loaded yet: call it
    before importing torch."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env.update(SPIN_DEFAULTS)


def set_torch_threads(threads: int | str) -> int:
    """torch's intra-op threads for this process; returns the count set."""
    import torch

    n = resolve_threads(threads)
    torch.set_num_threads(n)
    return n
