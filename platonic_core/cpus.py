"""How many CPUs this process may use, for torch's intra-op threads.

`os.cpu_count()` is the machine's; a process pinned to fewer cores (taskset, Slurm, a
container's cpuset) or under a CPU quota (cgroup `cpu.max`, Kubernetes limits) that starts
that many threads makes them wait on each other. A recipe's `threads: auto` resolves here.
"""

from __future__ import annotations

import math
import os
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


def set_torch_threads(threads: int | str) -> int:
    """torch's intra-op threads for this process; returns the count set."""
    import torch

    n = resolve_threads(threads)
    torch.set_num_threads(n)
    return n
