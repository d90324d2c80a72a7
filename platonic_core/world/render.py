"""Image renderer: a scene -> a small RGB image, with nuisance.

Two renders of one scene differ in object jitter (position within the cell, size, colour),
background texture and pixel noise: two observations of one state, the image modality's
*good views*. Pure numpy, vectorised over pixels.
"""

from __future__ import annotations

import numpy as np

from .scenes import Scene

# RGB in [0, 1], indexed like scenes.COLOURS
PALETTE = np.array(
    [
        [0.90, 0.15, 0.15],  # red
        [0.15, 0.80, 0.20],  # green
        [0.20, 0.35, 0.95],  # blue
        [0.95, 0.90, 0.15],  # yellow
        [0.65, 0.20, 0.80],  # purple
        [1.00, 0.55, 0.05],  # orange
        [0.10, 0.85, 0.85],  # cyan
        [0.97, 0.97, 0.97],  # white
    ],
    dtype=np.float32,
)
BACKGROUND_RGB = np.array([[0.06, 0.06, 0.08], [0.45, 0.45, 0.45]], dtype=np.float32)
SIZE_RADIUS = np.array([0.17, 0.27, 0.38], dtype=np.float32)  # fraction of a cell


def _shape_mask(shape: int, dx: np.ndarray, dy: np.ndarray, r: float) -> np.ndarray:
    ax, ay = np.abs(dx), np.abs(dy)
    if shape == 0:  # circle
        return dx * dx + dy * dy <= r * r
    if shape == 1:  # square
        return np.maximum(ax, ay) <= 0.85 * r
    if shape == 2:  # triangle, apex up (y grows downward)
        return (dy >= -r) & (dy <= r) & (ax <= (dy + r) * 0.55)
    if shape == 3:  # cross
        return ((ax <= 0.33 * r) & (ay <= r)) | ((ay <= 0.33 * r) & (ax <= r))
    if shape == 4:  # diamond
        return ax + ay <= 1.15 * r
    if shape == 5:  # ring
        d2 = dx * dx + dy * dy
        return (d2 <= r * r) & (d2 >= (0.55 * r) ** 2)
    if shape == 6:  # horizontal bar
        return (ay <= 0.35 * r) & (ax <= 1.1 * r)
    if shape == 7:  # vertical bar
        return (ax <= 0.35 * r) & (ay <= 1.1 * r)
    raise ValueError(f"unknown shape {shape}")


def render(scene: Scene, rng: np.random.Generator, size: int, grid: int, noise: float) -> np.ndarray:
    """Render one observation of `scene`: (H, W, 3) uint8."""
    bg = BACKGROUND_RGB[scene.background] + rng.normal(0, 0.03, 3).astype(np.float32)
    img = np.broadcast_to(bg, (size, size, 3)).copy()
    # background texture: a faint random-phase stripe pattern (nuisance)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    freq, phase, amp = rng.uniform(0.3, 0.9), rng.uniform(0, 2 * np.pi), rng.uniform(0, 0.05)
    theta = rng.uniform(0, np.pi)
    img += amp * np.sin(freq * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)[..., None]
    cell = size / grid
    for o in scene.objects:
        row, col = divmod(o.cell, grid)
        cx = (col + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
        cy = (row + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
        r = SIZE_RADIUS[o.size] * cell * rng.uniform(0.9, 1.1)
        mask = _shape_mask(o.shape, xx + 0.5 - cx, yy + 0.5 - cy, r)
        colour = np.clip(PALETTE[o.colour] + rng.normal(0, 0.04, 3), 0, 1).astype(np.float32)
        img[mask] = colour
    img += rng.normal(0, noise, img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
