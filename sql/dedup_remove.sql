-- What the removal policy removes. `hit`: the matches at a level the recipe removes
-- ({remove}). drop_text: those training texts; drop_image: every text of an image with one.
-- Each removed text is attributed once: to its strictest own match (`exact_match`,
-- `near_match`, `embed_match`), else `image_group_of_match`.
CREATE OR REPLACE TABLE removed AS
WITH hit AS (
    SELECT m.*, l.rank FROM matches AS m JOIN levels AS l USING (level) WHERE m.level IN ({remove})
), direct AS (
    SELECT text_id,
           first(eval_set ORDER BY rank, eval_set, eval_text_id) AS eval_set,
           first(eval_text_id ORDER BY rank, eval_set, eval_text_id) AS eval_text_id,
           first(level ORDER BY rank) || '_match' AS reason
    FROM hit GROUP BY text_id
), grp AS (
    SELECT image_id,
           first(eval_set ORDER BY rank, eval_set, eval_text_id) AS eval_set,
           first(eval_text_id ORDER BY rank, eval_set, eval_text_id) AS eval_text_id
    FROM hit GROUP BY image_id
)
SELECT text_id, eval_set, eval_text_id, reason FROM direct
UNION ALL
SELECT c.text_id, g.eval_set, g.eval_text_id, 'image_group_of_match' AS reason
FROM corpus AS c JOIN grp AS g ON c.image_id = g.image_id
WHERE '{policy}' = 'drop_image' AND c.text_id NOT IN (SELECT text_id FROM direct);
