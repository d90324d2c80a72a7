"""The one progress bar of long work (world, positives, dedup, training): tqdm on stderr,
kept on screen when done (a finished stage's bar says how long it took and how fast)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

LOG_EVERY = 10  # training steps between two metrics lines (MLflow, the bar's postfix), in-process or relayed


def bar(iterable: Iterable | None = None, *, desc: str, unit: str, total: int | None = None, **kw: Any) -> tqdm:
    return tqdm(iterable, desc=desc, unit=unit, total=total, leave=True, mininterval=0.5, dynamic_ncols=True, **kw)
