"""A recipe is data, never code (issue 19): what a recipe, a `--set` or a deployment's
parameters may make a worker do, how much YAML it may expand into, which numbers pass
validation, and the served stack's defaults (infra/compose.yaml)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from platonic.core import config
from platonic.core.config import AblationConfig, ConfigError, load_config, read_recipe

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
VLLM = ["positives.backend=vllm", "positives.models.recaption.id=m", "positives.models.paraphrase.id=m"]


def one_line_error(call) -> str:
    with pytest.raises(ConfigError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# ---- YAML cannot expand without bound ------------------------------------------------------


def laughs(indent: str = "    ") -> str:
    """Billion laughs: 9 levels of 9 aliases, ~387M nodes once expanded."""
    rows = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    rows += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    return "\n".join(indent + r for r in rows)


def test_a_billion_laughs_recipe_is_refused_fast_with_one_line(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(TINY.read_text() + "\npositives:\n  vllm_args:\n" + laughs() + "\n")
    t0 = time.perf_counter()
    msg = one_line_error(lambda: load_config(p))
    assert time.perf_counter() - t0 < 5 and str(p) in msg and "alias" in msg, msg


def test_a_billion_laughs_override_is_refused():
    value = "{l0: &a0 [" + ", ".join(["lol"] * 9) + "]"
    for i in range(1, 9):  # each level: 9 aliases of the one before
        value += f", l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
    msg = one_line_error(lambda: load_config(TINY, [f"positives.vllm_args={value}}}"]))
    assert "--set" in msg and "alias" in msg, msg


def test_deep_nesting_and_self_reference_are_refused(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("train: " + "[" * 5000 + "]" * 5000 + "\n")
    assert str(deep) in one_line_error(lambda: read_recipe(deep))
    loop = tmp_path / "loop.yaml"
    loop.write_text("positives:\n  vllm_args: &a {x: *a}\n")
    assert str(loop) in one_line_error(lambda: read_recipe(loop))


def test_an_oversized_recipe_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(TINY.read_text() + "#" * (config.MAX_RECIPE_BYTES + 1) + "\n")
    msg = one_line_error(lambda: read_recipe(big))
    assert str(big) in msg and "bytes" in msg, msg


def test_ordinary_anchors_still_load(tmp_path):
    p = tmp_path / "anchors.yaml"
    p.write_text(
        TINY.read_text().replace(
            "views: {good_sources: [recap], text_sources: [recap], vocab_size: 200}",
            "views: {good_sources: &src [recap], text_sources: *src, vocab_size: 200}",
        )
    )
    assert load_config(p).views.text_sources == ["recap"]


def test_the_cli_prints_one_error_line_for_a_bomb(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(TINY.read_text() + "\npositives:\n  vllm_args:\n" + laughs() + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", "stages", str(p)], capture_output=True, text=True, timeout=120
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr


# ---- numbers: seeds in range, floats finite ------------------------------------------------


@pytest.mark.parametrize(
    "item, key",
    [
        ("world.seed=-1", "world.seed"),
        ("seed=100000000000000000000000000", "seed"),
        ("seed=4294967296", "seed"),
        ("positives.seed=-5", "positives.seed"),
        ("views.seed=-1", "views.seed"),
        ("dedup.near.seed=-1", "dedup.near.seed"),
        ("evaluate.ceiling.seed=-1", "evaluate.ceiling.seed"),
        ("train.models.good.optim.lr=.inf", "train.models.good.optim.lr"),
        ("train.models.good.optim.lr=.nan", "train.models.good.optim.lr"),
        ("train.models.good.lam=.nan", "train.models.good.lam"),
        ("world.concentration=.inf", "world.concentration"),
        ("positives.http.timeout_s=.inf", "positives.http.timeout_s"),
    ],
)
def test_out_of_range_seeds_and_non_finite_floats_are_refused(item, key):
    msg = one_line_error(lambda: load_config(TINY, [item]))
    assert f"'{key}'" in msg, msg


def test_the_largest_seed_is_accepted():
    assert load_config(TINY, ["seed=4294967295", "world.seed=4294967295"]).world.seed == 2**32 - 1


def test_seed_lists_are_in_range_too():
    rows = {"r": {"good_sources": ["recap"], "text_sources": ["recap"]}}
    with pytest.raises(ValueError, match="seeds"):
        AblationConfig.model_validate({"rows": rows, "seeds": [-1, 0]})
