-- Corpus statistics as views over the catalog's `texts` and `quarantine` (both catalogs:
-- the world's tables and a real corpus's partition views).

-- texts per source kind (alt / recap / paraphrase / caption), images, lengths in characters
CREATE OR REPLACE VIEW stats_sources AS
SELECT
    source_kind,
    count(*)                                   AS texts,
    count(DISTINCT image_id)                   AS images,
    round(avg(length(text)), 1)                AS mean_chars,
    quantile_cont(length(text), 0.5)           AS median_chars,
    max(length(text))                          AS max_chars
FROM texts
GROUP BY source_kind
ORDER BY source_kind;

-- how many texts each image has: images with 1 text, 2 texts, ...
CREATE OR REPLACE VIEW stats_texts_per_image AS
SELECT texts_per_image, count(*) AS images
FROM (SELECT image_id, count(*) AS texts_per_image FROM texts GROUP BY image_id)
GROUP BY texts_per_image
ORDER BY texts_per_image;

-- length distribution per source kind: characters and words (whitespace-separated)
CREATE OR REPLACE VIEW stats_lengths AS
SELECT
    source_kind,
    quantile_disc(length(text), 0.05)          AS chars_p5,
    quantile_disc(length(text), 0.25)          AS chars_p25,
    quantile_disc(length(text), 0.5)           AS chars_p50,
    quantile_disc(length(text), 0.75)          AS chars_p75,
    quantile_disc(length(text), 0.95)          AS chars_p95,
    max(length(text))                          AS chars_max,
    round(avg(length(text) - length(replace(text, ' ', '')) + 1), 1) AS mean_words
FROM texts
GROUP BY source_kind
ORDER BY source_kind;

-- what was rejected and why
CREATE OR REPLACE VIEW stats_quarantine AS
SELECT reason, field, count(*) AS texts
FROM quarantine
GROUP BY reason, field
ORDER BY reason, field;
