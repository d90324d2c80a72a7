"""Seeded batch streams: `make_sampler` over in-memory data (every process draws the same
global batch), `StreamSampler` over the row groups of a views Parquet file (each process
reads its own). Both have a `state_dict()` so a resumed run draws what the killed one would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq
import torch

from ..tokenizer import DEFAULT_SPECIALS, encode
from .data import ImageData, TextData

if TYPE_CHECKING:
    from ..config import ModelConfig


def _trim(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = int(mask.sum(-1).max())
    return ids[..., :t], mask[..., :t]


def mask_tokens(
    ids: torch.Tensor, rate: float, span: int, gen: torch.Generator, specials: dict[str, int] | None = None
) -> torch.Tensor:
    """A corrupted copy of `ids`: spans of `span` tokens starting with probability
    rate/span are replaced by [MASK]; specials and padding are never masked. `specials`:
    the tokenizer's ids (`tokenizer.special_ids`) when not the built-in layout."""
    sp = specials or DEFAULT_SPECIALS
    maskable = (ids != sp["pad"]) & (ids != sp["cls"]) & (ids != sp["sep"])
    starts = torch.rand(ids.shape, generator=gen) < rate / span
    hit = starts.clone()
    for s in range(1, span):
        hit[:, s:] |= starts[:, :-s]
    return ids.masked_fill(hit & maskable, sp["mask"])


class Sampler:
    """A seeded batch stream with a state: `sampler()` is the next global batch;
    `state_dict()` / `load_state_dict()` make a resumed run draw what the killed one would."""

    def __init__(self, draw: Callable[[], dict], rng: np.random.Generator, gen: torch.Generator):
        self._draw, self.rng, self.gen = draw, rng, gen
        self.global_batch = True  # every process draws the same global batch, then slices it

    def __call__(self) -> dict:
        return self._draw()

    def state_dict(self) -> dict:
        return {"numpy": self.rng.bit_generator.state, "torch": self.gen.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["numpy"]
        self.gen.set_state(torch.tensor(state["torch"], dtype=torch.uint8))


def make_sampler(
    cfg: ModelConfig, data: TextData | ImageData, seed: int, specials: dict[str, int] | None = None
) -> Sampler:
    """The in-memory batch stream (global batches), fixed by `seed`."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    n = cfg.batch_size
    v = cfg.n_views
    population = len(data.renders) if isinstance(data, ImageData) else len(data.input_ids)
    if cfg.views != "good" and population < n:
        raise ValueError(f"{population} training samples for views {cfg.views!r}, fewer than batch_size {n}")
    if cfg.views in ("good", "documents"):
        groups = [g for g in data.groups if len(g) >= v]
        if len(groups) < n:
            raise ValueError(f"only {len(groups)} images have >= {v} texts; batch size is {n}")

        def good() -> dict:
            pick = rng.choice(len(groups), size=n, replace=False)
            rows = np.stack([rng.choice(groups[i], size=v, replace=False) for i in pick], 1)  # (V, N)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])  # (V, N, T)
            return {"input_ids": ids, "attention_mask": mask}

        if cfg.views == "good":
            return Sampler(good, rng, gen)
        lengths = data.attention_mask.sum(1).tolist()
        pad = (specials or DEFAULT_SPECIALS)["pad"]

        def documents() -> dict:
            pick = rng.choice(len(groups), size=n, replace=False)
            docs = [
                torch.cat([data.input_ids[r, : lengths[r]] for r in rng.choice(groups[i], size=v, replace=False)])
                for i in pick
            ]  # each text keeps its own [CLS] ... [SEP]: the document's separators
            ids = torch.full((n, max(len(d) for d in docs)), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, d in enumerate(docs):
                ids[j, : len(d)], mask[j, : len(d)] = d, 1
            return {"input_ids": ids, "attention_mask": mask}  # (N, <= V·T)

        return Sampler(documents, rng, gen)
    if cfg.views == "bad":

        def bad() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])  # (N, T)
            views = torch.stack([mask_tokens(ids, cfg.mask_rate, cfg.mask_span, gen, specials) for _ in range(v)])
            return {"input_ids": views, "attention_mask": mask.expand(v, -1, -1)}  # (V, N, T)

        return Sampler(bad, rng, gen)
    if cfg.views == "text":

        def text() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])
            return {"input_ids": ids, "attention_mask": mask}  # (N, T)

        return Sampler(text, rng, gen)
    if cfg.views == "renders":
        r = data.renders.shape[1]

        def renders() -> dict:
            rows = rng.choice(len(data.renders), size=n, replace=False)
            which = np.stack([rng.choice(r, size=v, replace=r < v) for _ in rows], 1)  # (V, N)
            imgs = torch.from_numpy(np.stack([data.renders[rows, which[k]] for k in range(v)]))
            return {"images": imgs}  # (V, N, H, W, 3) uint8

        return Sampler(renders, rng, gen)
    raise ValueError(f"unknown views {cfg.views!r}")


class StreamSampler:
    """Batches read from the row groups of a views Parquet file, never all in memory.

    Per epoch the row groups are permuted by (seed, epoch) and dealt to processes
    round-robin (rank r reads groups r, r+W, ...); rows are shuffled within a group by
    (seed, epoch, group), and so are the good-view choices; bad-view masks are seeded by
    (seed, epoch, position). So the stream is a function of (seed, rank, world) alone, and
    the data position {epoch, pos} (rows consumed this epoch) is all a resume needs. Each
    process yields its own `batch_size / world` rows (`global_batch` is False); an epoch's
    tail shorter than a batch is dropped."""

    global_batch = False

    def __init__(
        self,
        cfg: ModelConfig,
        views_dir: Path,
        seed: int,
        tok,
        max_len: int,
        specials: dict[str, int],
        rank: int = 0,
        world: int = 1,
    ):
        self.cfg, self.seed, self.tok, self.max_len, self.specials = cfg, seed, tok, max_len, specials
        self.rank, self.world = rank, world
        self.n = cfg.batch_size // world
        self.v = cfg.n_views
        name, self.column = ("good_views.parquet", "texts") if cfg.views == "good" else ("texts.parquet", "text")
        self.file = pq.ParquetFile(views_dir / name)
        meta = self.file.metadata
        self.sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if len(self.sizes) < world:
            raise ValueError(
                f"{name} has {len(self.sizes)} row groups for {world} processes; write the views with "
                "a smaller views.row_group_rows"
            )
        self.epoch, self.pos, self.draws = 0, 0, 0
        self._cache: tuple[int, int, list, np.ndarray, list] | None = None
        self._check()

    def _check(self) -> None:
        if self.cfg.views == "good" and self.sizes[0]:
            first = self.file.read_row_group(0, columns=[self.column])[self.column].to_pylist()
            if min(len(g) for g in first) < self.v:
                raise ValueError(
                    f"good views hold {min(len(g) for g in first)} texts per image, fewer than n_views = {self.v}"
                )
        if sum(self._groups(0)[1]) < self.n:
            raise ValueError(f"process {self.rank} has fewer rows than its batch {self.n}")

    def _groups(self, epoch: int) -> tuple[list[int], list[int]]:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.sizes))
        mine = [int(g) for g in order[self.rank :: self.world]]
        return mine, [self.sizes[g] for g in mine]

    def _group(self, epoch: int, k: int, g: int) -> tuple[list, np.ndarray, list]:
        if self._cache is None or self._cache[:2] != (epoch, k):
            rows = self.file.read_row_group(g, columns=[self.column])[self.column].to_pylist()
            rng = np.random.default_rng([self.seed, epoch, g])
            perm = rng.permutation(len(rows))
            picks = (
                [rng.choice(len(rows[i]), size=self.v, replace=False) for i in perm] if self.cfg.views == "good" else []
            )
            self._cache = (epoch, k, rows, perm, picks)
        return self._cache[2:]

    def _take(self) -> list:
        """The next `n` rows (for good views: the V chosen texts of each)."""
        mine, sizes = self._groups(self.epoch)
        out, pos, need = [], self.pos, self.n
        starts = np.cumsum([0, *sizes])
        while need:
            k = int(np.searchsorted(starts, pos, side="right") - 1)
            rows, perm, picks = self._group(self.epoch, k, mine[k])
            off = pos - int(starts[k])
            take = min(need, sizes[k] - off)
            for j in range(off, off + take):
                r = rows[perm[j]]
                out.append([r[c] for c in picks[j]] if self.cfg.views == "good" else r)
            pos, need = pos + take, need - take
        self.pos = pos
        return out

    def __call__(self) -> dict:
        self.draws += 1
        if self.pos + self.n > sum(self._groups(self.epoch)[1]):
            self.epoch, self.pos = self.epoch + 1, 0
        epoch, pos = self.epoch, self.pos
        rows = self._take()
        if self.cfg.views == "good":
            texts = [t for k in range(self.v) for t in (r[k] for r in rows)]  # view-major
            ids, mask = encode(self.tok, texts, self.max_len, self.specials)  # (V*N, T)
            return {"input_ids": ids.view(self.v, self.n, -1), "attention_mask": mask.view(self.v, self.n, -1)}
        ids, mask = encode(self.tok, rows, self.max_len, self.specials)  # (N, T)
        if self.cfg.views == "text":
            return {"input_ids": ids, "attention_mask": mask}
        gen = torch.Generator().manual_seed(
            int(np.random.default_rng([self.seed, epoch, pos, self.rank]).integers(2**62))
        )
        views = torch.stack(
            [mask_tokens(ids, self.cfg.mask_rate, self.cfg.mask_span, gen, self.specials) for _ in range(self.v)]
        )
        return {"input_ids": views, "attention_mask": mask.expand(self.v, -1, -1)}  # (V, N, T)

    def state_dict(self) -> dict:
        """Rank 0's position and the batches drawn; every process recomputes its own
        position from `draws` (each draw takes `n` rows of its own groups)."""
        return {"epoch": self.epoch, "pos": self.pos, "draws": self.draws}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos, self._cache, self.draws = 0, 0, None, 0
        left = state["draws"]
        while left:  # row-group sizes only: no reading
            per_epoch = (sum(self._groups(self.epoch)[1]) - self.pos) // self.n
            if left < per_epoch:
                self.pos += left * self.n
                break
            left -= per_epoch
            self.epoch, self.pos = self.epoch + 1, 0
        self.draws = state["draws"]
