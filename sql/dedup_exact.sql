-- Exact contamination: training texts whose normalised form equals an eval caption's.
-- `corpus(text_id, image_id, source_kind, text, source_uri, source_row)` is a view over the
-- corpus Parquet (streamed, never loaded whole); `eval(eval_set, eval_text_id,
-- eval_image_id, eval_text, norm)` holds the normalised eval captions (small: the hash
-- join's build side). `platonic_norm` is platonic.core.dedup.normalize_text as a UDF.
CREATE OR REPLACE TABLE exact_matches AS
SELECT e.eval_set, e.eval_text_id, e.eval_image_id, e.eval_text, 'exact' AS level, 1.0::DOUBLE AS score,
       c.text_id, c.image_id, c.source_kind, c.text, c.source_uri, c.source_row
FROM corpus AS c
JOIN (SELECT * FROM eval WHERE norm <> '') AS e ON platonic_norm(c.text) = e.norm;  -- "..." matches nothing
