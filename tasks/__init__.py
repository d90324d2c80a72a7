"""Prefect and MLflow adapters: ONE executor applies the stage contract (cache key, lock,
MLflow run, lineage) to any stage of `platonic.core.stages` (executor.py); flow-level runs
(runs.py), MLflow calls and tag names (tracking.py), fan-out on Dask (fanout.py), lineage
(lineage.py), a registered encoder's pyfunc flavor (encoder_model.py)."""
