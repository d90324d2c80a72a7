-- webdataset corpora: every image member, located in its tar (not decoded at ingest).
CREATE OR REPLACE VIEW images AS
    SELECT * FROM read_parquet('images/*/*.parquet', hive_partitioning = true, hive_types = {'shard': 'VARCHAR'});
