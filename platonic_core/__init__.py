"""The library: the import path `platonic.core` lives in this folder, `platonic_core/`
(as `platonic.tasks` lives in tasks/ and `platonic.flows` in flows/; pyproject's
`[tool.setuptools.package-dir]` maps each name to its folder).

It computes, and holds the DAG as data: each stage's spec (`stages`), the recipes (`config`),
the synthetic world, readers, positives, dedup, views, models, objectives, training, features,
metrics, matching and captioning. It imports neither Prefect, MLflow, `platonic.tasks` nor
`platonic.flows` (platonic_core/ruff.toml, tests/test_layout.py): what a notebook user gets."""
