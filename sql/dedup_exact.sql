-- Exact contamination: training texts whose normalised form equals an eval caption's.
-- Tables `train(text_id, image_id, source_kind, norm)` and `eval(text_id, image_id, norm)`
-- are registered by platonic_core.dedup.
CREATE OR REPLACE TABLE matches AS
SELECT t.text_id, t.image_id, t.source_kind, e.text_id AS eval_text_id, e.image_id AS eval_image_id
FROM train AS t
JOIN eval AS e ON t.norm = e.norm;

-- What the policy removes: the matching texts, or every text of an image with a match.
CREATE OR REPLACE TABLE removed AS
SELECT t.text_id,
       any_value(m.eval_text_id) AS eval_text_id,
       CASE WHEN bool_or(m.text_id = t.text_id) THEN 'exact_match' ELSE 'image_group_of_match' END AS reason
FROM train AS t
JOIN matches AS m
  ON (CASE WHEN '{policy}' = 'drop_image' THEN m.image_id = t.image_id ELSE m.text_id = t.text_id END)
GROUP BY t.text_id;
