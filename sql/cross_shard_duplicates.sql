-- Text ids present in more than one shard ({texts}: the glob of the texts partitions).
-- Within a shard duplicates are already quarantined, so a repeated id here spans shards;
-- the caller keeps the first shard's text and quarantines the others.
WITH t AS (
    SELECT text_id, shard, source_row
    FROM read_parquet('{texts}', hive_partitioning = true, hive_types = {'shard': 'VARCHAR'}, union_by_name = true)
),
repeated AS (
    SELECT text_id FROM t GROUP BY text_id HAVING count(*) > 1
)
SELECT t.text_id, t.shard, t.source_row
FROM t SEMI JOIN repeated USING (text_id);
