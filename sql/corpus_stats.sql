-- Corpus statistics over the catalog views: texts per source kind, per image, lengths.
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
