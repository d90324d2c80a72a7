-- DuckDB catalog of an ingested real corpus: views over the Hive-partitioned shards
-- (texts/shard=<id>/data.parquet, ...). Paths are relative to the catalog's folder
-- (platonic.core.data.catalog opens it with file_search_path set there), so the catalog
-- stays valid when the folder moves, and a query on one shard reads only that shard:
--     SELECT count(*) FROM texts WHERE shard = 'train-00042-of-03550';
-- union_by_name: older Recap shards lack the diverse top-k recaption columns.
CREATE OR REPLACE VIEW texts AS
    SELECT * FROM read_parquet('texts/*/*.parquet', hive_partitioning = true, hive_types = {'shard': 'VARCHAR'}, union_by_name = true);
CREATE OR REPLACE VIEW quarantine AS
    SELECT * FROM read_parquet('quarantine/*/*.parquet', hive_partitioning = true, hive_types = {'shard': 'VARCHAR'}, union_by_name = true);
CREATE OR REPLACE VIEW shards AS SELECT * FROM read_parquet('shards.parquet');
