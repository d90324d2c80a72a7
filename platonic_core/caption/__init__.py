"""Captioning through one map: an image encoder -> one linear map -> a decoder trained on text only.

The paper's first showcase (frozen DINOv2 features, one linear map fitted on Flickr30k pairs,
an LM fine-tuned on COCO captions alone: CIDEr 83.8), and the theorem's stronger claim that
the map needs no pair at all. Modules, in the order the `caption` flow runs them:

- `recipe`: the caption recipe and its base pipeline recipe, checked together;
- `data`: images and captions materialised (the synthetic world, or Karpathy JSONs);
- `encode`: one layer of features of them with each encoder (ours or any transformers model);
- `decoder`: the text-only decoder (a causal LM with a prefix made of one text embedding);
- `maps`, `pairfree`: paired maps at N pairs, and a rotation found without pairs;
- `evaluate`, `score`: captions for held-out images, bounds, pycocoevalcap scores;
- `summary`, `run`: the stage computations and the table over seeds (report.py draws it).
"""
