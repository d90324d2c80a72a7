"""Prefect tasks, one per stage: each adapts a `platonic_core` stage function to the stage
contract (cache key, artifact store, MLflow) through `tasks.stage.execute`."""
