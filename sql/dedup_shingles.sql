-- Word shingles for the near-duplicate level: every word n-gram (n in {sizes}) of the
-- normalised text as one 64-bit hash (the hash of its words' hashes), each once. MinHash
-- (platonic_core/minhash.py) reads `corpus_shingles` in batches and `eval_shingles` once.
-- Words are hashed once per text (`h`), n-grams from those: about 2x faster than hashing
-- each n-gram's string.
CREATE OR REPLACE MACRO word_shingles(h, sizes) AS
    list_distinct(flatten(list_transform(sizes, lambda n:
        list_transform(range(1, len(h) - n + 2), lambda i: hash(h[i:i + n - 1])))));

CREATE OR REPLACE MACRO word_hashes(norm) AS list_transform(string_split(norm, ' '), lambda x: hash(x));

CREATE OR REPLACE TABLE eval_shingles AS
SELECT eval_row, eval_set, eval_text_id, eval_image_id, eval_text, word_shingles(h, {sizes}) AS shingles
FROM (SELECT row_number() OVER () - 1 AS eval_row, *, word_hashes(norm) AS h FROM eval WHERE norm <> '')
ORDER BY eval_row;

CREATE OR REPLACE VIEW corpus_shingles AS
SELECT text_id, image_id, source_kind, text, source_uri, source_row, word_shingles(h, {sizes}) AS shingles
FROM (SELECT *, word_hashes(norm) AS h FROM (SELECT *, platonic_norm(text) AS norm FROM corpus) WHERE norm <> '');
