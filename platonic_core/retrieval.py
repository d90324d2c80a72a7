"""Cross-modal retrieval through one linear map fitted on training pairs.

Fit W on (text, image) training pairs, map eval texts into the image space (or back), and
rank by cosine similarity: R@1 / R@5 for text→image and image→text (Flickr protocol:
several captions may share an image; a query hits if its own image, or one of its own
captions, is among the top k).

Maps:
- "procrustes": the orthogonal W minimising ||X W − Y||_F (X, Y centred and scaled to unit
  Frobenius norm, padded to a common width): W = U Vᵀ from the SVD of Xᵀ Y. It is the
  "one rotation" of the theorem; the normalised residual ||X W − Y||_F / ||Y||_F says how
  far the two representations are from being rotations of each other: 0 = exactly, about
  √2 ≈ 1.41 for unrelated representations (both sides have unit norm).
- "lstsq": ridge least squares W = (XᵀX + αI)⁻¹ XᵀY.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import orthogonal_procrustes


@dataclass(frozen=True)
class LinearMap:
    kind: str
    weight: np.ndarray  # (Dx', Dy')
    x_mean: np.ndarray
    y_mean: np.ndarray
    x_scale: float
    y_scale: float
    width: int  # common width (Procrustes pads to it)

    def _pad(self, a: np.ndarray) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, self.width - a.shape[1]))) if a.shape[1] < self.width else a

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Map X-space rows into (centred, scaled) Y space."""
        return self._pad((x - self.x_mean) / self.x_scale) @ self.weight

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Map X-space rows into Y's own coordinates (the fitted centring and scale undone):
        (N, Dx) -> (N, Dy), what a consumer of Y features (a decoder) reads."""
        dy = self.y_mean.shape[0]
        return self.forward(x)[:, :dy] * self.y_scale + self.y_mean

    def target(self, y: np.ndarray) -> np.ndarray:
        """Y-space rows in the same centred, scaled coordinates."""
        return self._pad((y - self.y_mean) / self.y_scale)


def fit_map(x: np.ndarray, y: np.ndarray, kind: str = "procrustes", ridge: float = 1e-3) -> LinearMap:
    """Fit X -> Y on paired rows. x: (N, Dx), y: (N, Dy)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"paired rows differ: {x.shape[0]} vs {y.shape[0]}")
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    xm, ym = x.mean(0), y.mean(0)
    xc, yc = x - xm, y - ym
    xs, ys = float(np.linalg.norm(xc)) or 1.0, float(np.linalg.norm(yc)) or 1.0
    xc, yc = xc / xs, yc / ys
    if kind == "procrustes":
        width = max(x.shape[1], y.shape[1])
        xp = np.pad(xc, ((0, 0), (0, width - x.shape[1])))
        yp = np.pad(yc, ((0, 0), (0, width - y.shape[1])))
        rotation, _ = orthogonal_procrustes(xp, yp)  # U Vᵀ from the SVD of Xᵀ Y
        return LinearMap(kind, rotation, xm, ym, xs, ys, width)
    if kind == "lstsq":
        w = np.linalg.solve(xc.T @ xc + ridge * np.eye(xc.shape[1]), xc.T @ yc)
        return LinearMap(kind, w, xm, ym, xs, ys, x.shape[1])
    raise ValueError(f"unknown map {kind!r} (procrustes or lstsq)")


def residual(m: LinearMap, x: np.ndarray, y: np.ndarray) -> float:
    """||map(X) − Y||_F / ||Y||_F in the fitted coordinates (0: a perfect map)."""
    pred = m.forward(x)
    tgt = m.target(y)
    tgt = tgt[:, : pred.shape[1]] if tgt.shape[1] > pred.shape[1] else tgt
    return float(np.linalg.norm(pred - tgt) / max(np.linalg.norm(tgt), 1e-12))


def unit_rows(a: np.ndarray) -> np.ndarray:
    """Each row of (N, D) scaled to unit length (a zero row stays zero)."""
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def recall_at_k(
    queries: np.ndarray, gallery: np.ndarray, query_group: np.ndarray, gallery_group: np.ndarray, ks=(1, 5)
) -> dict[int, float]:
    """Fraction of queries whose top-k gallery items (cosine) include one of their group."""
    sim = unit_rows(queries) @ unit_rows(gallery).T  # (Q, G)
    order = np.argsort(-sim, axis=1)
    hit_rank = np.full(len(queries), np.inf)
    match = gallery_group[order] == query_group[:, None]  # (Q, G)
    has = match.any(1)
    hit_rank[has] = match[has].argmax(1)
    return {k: float((hit_rank < k).mean()) for k in ks}


def retrieval(
    train_text: np.ndarray,
    train_image: np.ndarray,
    eval_text: np.ndarray,
    eval_image: np.ndarray,
    text_image_ids: np.ndarray,
    image_ids: np.ndarray,
    kind: str = "procrustes",
    ks=(1, 5),
) -> dict[str, float]:
    """Fit text->image on training pairs; R@k both ways on the eval split.

    eval_text: (T, Dt) captions with `text_image_ids` (T,) naming their image;
    eval_image: (I, Di) images with `image_ids` (I,)."""
    m = fit_map(train_text, train_image, kind)
    t = m.forward(eval_text)
    g = m.target(eval_image)[:, : t.shape[1]]
    t2i = recall_at_k(t, g, np.asarray(text_image_ids), np.asarray(image_ids), ks)
    i2t = recall_at_k(g, t, np.asarray(image_ids), np.asarray(text_image_ids), ks)
    out = {f"t2i_R@{k}": v for k, v in t2i.items()} | {f"i2t_R@{k}": v for k, v in i2t.items()}
    out["train_residual"] = residual(m, train_text, train_image)
    if len(eval_text) == len(eval_image):  # paired eval rows: how far from a rotation, held out
        out["heldout_residual"] = residual(m, eval_text, eval_image)
    return out


def split_halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random half/half split of n rows: (fit rows, held-out rows)."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2 :])
