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


def test_short_openmp_spins_unless_the_user_chose_a_wait_policy():
    from platonic.core.cpus import SPIN_DEFAULTS, short_openmp_spins

    env: dict[str, str] = {}
    short_openmp_spins(env)
    assert env == SPIN_DEFAULTS
    for chosen in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}):
        env = dict(chosen)
        short_openmp_spins(env)
        assert env == chosen


def test_the_app_sets_short_spins_before_torch_is_imported():
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import sys, os, platonic.flows; print(os.environ['GOMP_SPINCOUNT'], 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1000", "False"]
