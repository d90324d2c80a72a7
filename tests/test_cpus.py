"""Torch threads sized from the CPUs this process may use (platonic_core/cpus.py)."""

from __future__ import annotations

import os

import pytest

from platonic.core.config import ConfigError, load_config
from platonic.core.cpus import resolve_threads, usable_cpus


def test_usable_cpus_is_the_affinity_mask_capped_by_the_cgroup_quota(tmp_path):
    mask = len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path) == mask  # no cgroup files: the mask
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path) == mask
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: one thread
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{(mask + 3) * 100000} 100000\n")  # a quota above the mask
    assert usable_cpus(tmp_path) == mask


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_threads_field_takes_a_count_or_auto():
    assert load_config("tiny", ["train.threads=auto"]).train.threads == "auto"
    assert resolve_threads("auto") == usable_cpus() and resolve_threads(3) == 3
    for bad in ("train.threads=0", "train.threads=many"):
        with pytest.raises(ConfigError, match="train.threads"):
            load_config("tiny", [bad])


@pytest.mark.parametrize(
    "module, defaults, setter, chosen",
    [
        ("cpus", "SPIN_DEFAULTS", "short_openmp_spins", ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"})),
        (
            "allocator",
            "MALLOC_ENV",
            "keep_freed_memory",
            ({"MALLOC_MMAP_THRESHOLD_": "131072"}, {"MALLOC_TRIM_THRESHOLD_": "0"}),
        ),
    ],
)
def test_the_app_sets_its_runtime_variables_unless_the_user_chose(module, defaults, setter, chosen):
    """OpenMP's spins and glibc's malloc thresholds: set in the environment given (here a
    dict, another process's: nothing is applied to this one), left alone where the user set
    any of them."""
    import importlib

    mod = importlib.import_module(f"platonic.core.{module}")
    env: dict[str, str] = {}
    assert not getattr(mod, setter)(env)
    assert env == getattr(mod, defaults)
    for user in chosen:
        env = dict(user)
        getattr(mod, setter)(env)
        assert env == user


def test_the_app_sets_short_spins_before_torch_is_imported():
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import sys, os, platonic.flows; print(os.environ['GOMP_SPINCOUNT'], 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1000", "False"]


def test_the_app_keeps_freed_memory_in_its_processes():
    """Importing the app sets glibc's variables for the processes it starts (the trainer fork
    server, torchrun's ranks) and applies them to itself; a trainer the fork server forks
    inherits them. Checked by the page faults of a step that allocates three 8 MB blocks and
    frees them: at glibc's defaults the freed 24 MB at the heap's top is returned to the
    kernel (above twice the threshold) and faulted back in next step; kept with the settings."""
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    code = """
import os, resource, sys
if sys.argv[1] == "app":
    import platonic.flows
import numpy as np
def step():
    blocks = [np.ones(1 << 20) for _ in range(3)]  # 3 x 8 MB, freed together at the return
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(os.environ.get("MALLOC_MMAP_THRESHOLD_"), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
    runs = {
        how: subprocess.run(
            [sys.executable, "-c", code, how], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for how in ("plain", "app")
    }
    assert runs["plain"][0] == "None" and runs["app"][0] == str(32 << 20)
    # 10 steps x 24 MB = 60,000 pages: most faulted anew by default, almost none kept
    assert int(runs["plain"][1]) > 5_000 and int(runs["app"][1]) < 500
