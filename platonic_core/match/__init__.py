"""Pair-free classification: class names matched to image clusters by the shape of their
similarity structures, without a single image-text pair (the paper's ImageNet-100 showcase;
protocol after Schnaus et al., CVPR 2025).

Modules: `kmeans` (clusters), `solver` (the quadratic assignment: exact / FAQ + 2-opt, swap
gains for top-k), `matcher` (the protocol over seeds: top-1, top-k, chance, oracle), `data`
(the world's single-object scenes, Fashion-MNIST, ImageFolder / ImageNet-100), `efficientnet`
(EfficientNet-Lite0 in plain PyTorch), `features` (prompts and images through encoders),
`report` (scores.json, table, plot). The stages are in `platonic_core/stages/match.py` (MATCH_SPECS).
"""

from .matcher import class_features, kernel, match_classes, match_once
from .solver import solve, standardise_kernel, swap_gains

__all__ = ["class_features", "kernel", "match_classes", "match_once", "solve", "standardise_kernel", "swap_gains"]
