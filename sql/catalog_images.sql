-- webdataset corpora: every image member, located in its tar (not decoded at ingest).
-- `tar` is the shard's file name; `uri` (from the shards table) is where it is now, so
--     SELECT uri, member, "offset", size FROM images WHERE image_id = ?
-- gives what platonic.core.data.readers.read_image_member needs.
CREATE OR REPLACE VIEW images AS
    SELECT i.*, s.uri
    FROM read_parquet('images/*/*.parquet', hive_partitioning = true, hive_types = {'shard': 'VARCHAR'}) AS i
    JOIN shards AS s USING (shard);
