-- Word shingles for the near-duplicate level: every word n-gram (n in {sizes}) of the
-- normalised text, hashed to 64 bits, each once. MinHash (platonic_core/minhash.py) reads
-- `corpus_shingles` in batches and `eval_shingles` once.
CREATE OR REPLACE MACRO word_shingles(w, sizes) AS
    list_distinct(flatten(list_transform(sizes, lambda n:
        list_transform(range(1, len(w) - n + 2), lambda i: hash(array_to_string(w[i:i + n - 1], ' '))))));

CREATE OR REPLACE TABLE eval_shingles AS
SELECT row_number() OVER () - 1 AS eval_row, eval_set, eval_text_id, eval_image_id, eval_text,
       word_shingles(string_split(norm, ' '), {sizes}) AS shingles
FROM eval
WHERE norm <> ''
ORDER BY eval_row;

CREATE OR REPLACE VIEW corpus_shingles AS
SELECT text_id, image_id, source_kind, text, source_uri, source_row,
       word_shingles(string_split(norm, ' '), {sizes}) AS shingles
FROM (SELECT *, platonic_norm(text) AS norm FROM corpus)
WHERE norm <> '';
