-- Texts per image and source kind after each text stage, for `platonic corpus stats`.
SELECT image_id, count(*) AS texts, list(DISTINCT source_kind ORDER BY source_kind) AS kinds
FROM texts GROUP BY image_id ORDER BY image_id;
