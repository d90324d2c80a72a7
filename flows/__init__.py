"""Prefect flows: wiring only. The stage logic lives in `tasks/` and `platonic_core/`."""
