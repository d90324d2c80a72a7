-- Every (eval caption, training text) pair once, at its strictest level; then the counts per
-- eval set and level. `levels(level, rank)`: the audited levels, strictest first.
CREATE OR REPLACE TABLE matches AS
SELECT m.* EXCLUDE (rank)
FROM (SELECT a.*, l.rank FROM all_matches AS a JOIN levels AS l USING (level)) AS m
QUALIFY row_number() OVER (PARTITION BY eval_set, eval_text_id, text_id ORDER BY rank, score DESC) = 1
ORDER BY eval_set, eval_text_id, rank, text_id;

-- Per eval set and level: captions / images / training texts with a match at this level or
-- a stricter one (`*_cum`: "how many are contaminated at this level"; the difference to the
-- previous level is what this level adds).
CREATE OR REPLACE TABLE level_counts AS
SELECT s.eval_set, l.level, l.rank,
       any_value(s.captions) AS eval_captions, any_value(s.images) AS eval_images,
       count(DISTINCT m.eval_text_id) FILTER (WHERE ml.rank <= l.rank) AS captions_cum,
       count(DISTINCT m.eval_image_id) FILTER (WHERE ml.rank <= l.rank) AS images_cum,
       count(DISTINCT m.text_id) FILTER (WHERE ml.rank <= l.rank) AS texts_cum
FROM (SELECT eval_set, count(*) AS captions, count(DISTINCT eval_image_id) AS images FROM eval GROUP BY 1) AS s
CROSS JOIN levels AS l
LEFT JOIN matches AS m ON m.eval_set = s.eval_set
LEFT JOIN levels AS ml ON ml.level = m.level
GROUP BY s.eval_set, l.level, l.rank
ORDER BY s.eval_set, l.rank;

-- training texts matched, per eval set, level (cumulative) and source kind
CREATE OR REPLACE TABLE kind_counts AS
SELECT s.eval_set, l.level, l.rank, m.source_kind, count(DISTINCT m.text_id) AS texts
FROM (SELECT DISTINCT eval_set FROM eval) AS s
CROSS JOIN levels AS l
JOIN matches AS m ON m.eval_set = s.eval_set
JOIN levels AS ml ON ml.level = m.level AND ml.rank <= l.rank
GROUP BY s.eval_set, l.level, l.rank, m.source_kind
ORDER BY s.eval_set, l.rank, m.source_kind;
