"""benchmarks/tokens_per_sample.py on the session's wordnet_tiny run: a next-token document is
the same texts of one synset as a good-view pair, in one sequence, so with the same draws the
two count the same tokens (the reason docs/realdata.md's token ratio equals its sample ratio)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "tokens_per_sample.py"
sys.path.insert(0, str(SCRIPT.parent))

import tokens_per_sample  # noqa: E402


def _views(out: Path) -> Path:
    (views,) = (out / "artifacts" / "views").iterdir()
    return views


def test_a_document_counts_the_tokens_of_its_pair(wordnet_tiny_run):
    views = _views(wordnet_tiny_run[0])
    pair = tokens_per_sample.mean_tokens(views, "good", "text_jepa", batches=5, seed=0, batch=8)
    doc = tokens_per_sample.mean_tokens(views, "documents", "causal_lm", batches=5, seed=0, batch=8)
    assert pair > 4  # [CLS] ... [SEP] twice, and words between
    assert doc == pair
    other = tokens_per_sample.mean_tokens(views, "good", "text_jepa", batches=5, seed=1, batch=8)
    assert other != pair  # another seed draws other synsets


def test_the_script_prints_the_token_ratio_and_refuses_a_non_views_folder(wordnet_tiny_run, tmp_path):
    views = _views(wordnet_tiny_run[0])
    cmd = [sys.executable, str(SCRIPT), str(views), "--batches", "3", "--batch", "8", "--sample-ratio", "5"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
    assert "token ratio = sample ratio x 1.000" in run.stdout
    assert "sample ratio 5 -> token ratio 5.00" in run.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and "not a views artifact" in bad.stderr
