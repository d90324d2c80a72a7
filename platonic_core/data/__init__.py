"""Readers, the normalised text schema, and the DuckDB catalog."""
