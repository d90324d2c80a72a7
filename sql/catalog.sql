-- DuckDB catalog of one ingested corpus. {corpus}, {eval}, {images}, {quarantine} are
-- Parquet paths filled in by platonic.core.data.catalog. Tables, not views, so the catalog
-- stays valid when the artifact folder moves; the Parquet files remain the content that
-- the artifact digest covers (the .duckdb file is a derived index).
CREATE OR REPLACE TABLE texts AS SELECT * FROM read_parquet('{corpus}');
CREATE OR REPLACE TABLE eval_texts AS SELECT * FROM read_parquet('{eval}');
CREATE OR REPLACE TABLE images AS SELECT * FROM read_parquet('{images}');
CREATE OR REPLACE TABLE quarantine AS SELECT * FROM read_parquet('{quarantine}');
