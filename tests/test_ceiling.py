"""Oracle features of the world's ground truth (platonic_core/ceiling.py)."""

from __future__ import annotations

import numpy as np
import pytest

from platonic.core.ceiling import attribute_bag, fit_feature_mlp
from platonic.core.config import CeilingConfig, WorldConfig
from platonic.core.metrics import alignment
from platonic.core.world.scenes import Scene, SceneObject


def test_attribute_bag_counts_values_without_binding():
    cfg = WorldConfig()
    red_circle_blue_square = Scene((SceneObject(0, 0, 1, 4), SceneObject(1, 2, 1, 0)), 1)
    blue_circle_red_square = Scene((SceneObject(0, 2, 1, 4), SceneObject(1, 0, 1, 0)), 1)
    v = attribute_bag(red_circle_blue_square, cfg)
    assert v.shape == (8 + 8 + 3 + 9 + 2,)
    assert v[0] == v[1] == 1  # a circle, a square
    assert v[8 + 0] == v[8 + 2] == 1  # red, blue
    assert v[16 + 1] == 2  # two medium objects
    assert v[19 + 4] == v[19 + 0] == 1 and v[28 + 1] == 1  # cells 4 and 0, grey background
    assert v.sum() == 2 * 4 + 1
    # a bag of words cannot tell which colour goes with which shape: the world can
    assert np.array_equal(v, attribute_bag(blue_circle_red_square, cfg))


def test_exact_ties_fall_back_to_index_order_and_jitter_breaks_them():
    # 40 points in 4 identical groups of 10: with k = 9 every tie is exact
    base = np.repeat(np.eye(4, dtype=np.float32), 10, axis=0)
    partner = base + 0.01 * np.random.default_rng(0).standard_normal(base.shape).astype(np.float32)
    tied = alignment(base, partner, k=9, n_boot=0).score
    rng = np.random.default_rng(1)
    jittered = np.mean(
        [
            alignment(base + 1e-3 * rng.standard_normal(base.shape).astype(np.float32), partner, k=9, n_boot=0).score
            for _ in range(5)
        ]
    )
    # the groups are the neighbourhoods on both sides: jitter finds them, exact ties already do here
    assert jittered == pytest.approx(1.0, abs=1e-6) and tied == pytest.approx(1.0, abs=1e-6)
    # with k larger than a group, the tied side picks neighbours by index: jitter averages that out
    k = 12
    tied = alignment(base, partner, k=k, n_boot=0).score
    jittered = np.mean(
        [
            alignment(base + 1e-3 * rng.standard_normal(base.shape).astype(np.float32), partner, k=k, n_boot=0).score
            for _ in range(5)
        ]
    )
    assert abs(tied - jittered) > 1e-3


def test_feature_mlp_learns_a_function_of_the_scene_and_reports_held_out_fit():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=(2000, 12)).astype(np.float32)
    w = rng.standard_normal((12, 6)).astype(np.float32)
    y = np.tanh(x @ w)
    mlp, fit = fit_feature_mlp(x, y, CeilingConfig(hidden=64, epochs=20))
    assert fit["heldout_mse"] < 0.25 * fit["target_variance"]  # explains most of the held-out variance
    assert fit["train_mse"] <= fit["heldout_mse"] * 2
