"""The WordNet reader (platonic_core/data/readers/wordnet.py) on a fixture in WordNet 3.0's
own file format: 29 license lines and 31 real lines of /usr/share/wordnet/data.noun (the dog
and cat hypernym chains, an instance hypernym, a definition quoting a phrase), plus three
real lines made malformed (a non-hex word count, a line cut inside its pointers, a pointer
count one short)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from platonic.core.config import IngestConfig
from platonic.core.data.catalog import open_catalog
from platonic.core.data.corpus import ingest_corpus
from platonic.core.data.readers import READERS, resolve_sources
from platonic.core.data.readers.wordnet import (
    MalformedLine,
    WordNetReader,
    _parse_tokens,
    parse_data_line,
    read_data_file,
    split_gloss,
)

FIXTURE = Path(__file__).parent / "fixtures" / "wordnet" / "data.noun"
REAL = Path("/usr/share/wordnet/data.noun")
DOG = (
    "02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 002 @ 02083346 n 0000 @ 01317541 n 0000 "
    '| a member of the genus Canis; occurs in many breeds; "the dog barked all night"  '
)


def _config(**kw) -> IngestConfig:
    # IngestConfig.source does not list "wordnet" yet (config.py is being split): built unvalidated
    return IngestConfig.model_construct(source="wordnet", paths=[str(FIXTURE)], **kw)


def test_a_data_line_parses_into_lemmas_definition_examples_and_hypernyms():
    s = parse_data_line(DOG)
    assert s.wnid == "n02084071" and s.offset == 2084071 and s.lexname == "noun.animal"
    assert s.lemma_text == "dog, domestic dog, Canis familiaris"
    assert s.definition == "a member of the genus Canis; occurs in many breeds"
    assert s.examples == ("the dog barked all night",)
    assert s.hypernyms == ("n02083346", "n01317541")


def test_gloss_split_keeps_quotes_inside_a_definition_and_reads_examples_after_a_colon():
    assert split_gloss('promise of reward as in "carrot and stick"') == (
        'promise of reward as in "carrot and stick"',
        (),
    )
    assert split_gloss('the act of putting: "he sent Smith in"; "too late"') == (
        "the act of putting",
        ("he sent Smith in", "too late"),
    )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (DOG.replace(" 03 dog", " 0x dog"), "w_cnt"),
        (DOG.replace("02084071 05", "2084071 05"), "synset_offset"),
        (DOG.replace(" 002 @", " 003 @"), "pointer_symbol"),  # declares a pointer the line lacks
        (DOG.replace(" 002 @", " 001 @"), "p_cnt"),  # holds a pointer it does not declare
        (DOG.replace(" 0000 @", " 00x0 @"), "source_target"),
        (DOG.split("|")[0], "gloss"),  # cut before the gloss
        ("02084071 05 n", "w_cnt"),
        (DOG.replace(" 05 n", " 77 n"), "lex_filenum"),
    ],
)
def test_malformed_lines_name_the_field(line, field):
    with pytest.raises(MalformedLine) as e:
        parse_data_line(line)
    assert e.value.field == field


def test_fixture_counts_add_up():
    d = read_data_file(FIXTURE)
    assert d.header_lines == 29 and len(d.synsets) == 31
    assert [(i, f) for i, f, _ in d.malformed] == [(38, "w_cnt"), (49, "pointer_offset"), (57, "p_cnt")]
    assert d.lines == len(FIXTURE.read_text().splitlines())
    by = {s.wnid: s for s in d.synsets}
    assert by["n00060548"].hypernyms == ("n00058743",)  # Hegira: an instance hypernym (@i)
    assert by["n00001740"].hypernyms == ()  # entity: the root
    assert by["n00024720"].examples == (
        "the current state of knowledge",
        "his state of health",
        "in a weak financial state",
    )


def test_ingest_keeps_every_synset_text_and_quarantines_the_malformed_lines(tmp_path):
    assert READERS["wordnet"] is WordNetReader
    shards = resolve_sources([str(FIXTURE.parent)], "wordnet")
    assert [Path(s.uri).name for s in shards] == ["data.noun"]
    counts, results = ingest_corpus(shards, _config(batch_rows=7), tmp_path / "out", tmp_path / "cache")
    d = read_data_file(FIXTURE)
    n_texts = sum(2 + len(s.examples) for s in d.synsets)
    assert results[0].status == "ingested"
    assert counts["kept"] == n_texts and counts["quarantined"] == 3 == counts["quarantined_malformed_wordnet"]
    assert counts["in"] == counts["kept"] + counts["quarantined"]
    texts = pq.read_table(next((tmp_path / "out" / "texts").glob("*/data.parquet"))).to_pylist()
    dog = {t["text_id"]: t for t in texts if t["image_id"] == "n02084071"}
    assert set(dog) == {"n02084071:wn_lemmas:0", "n02084071:wn_definition:0", "n02084071:wn_example:0"}
    row = dog["n02084071:wn_lemmas:0"]
    assert row["text"] == "dog, domestic dog, Canis familiaris" and row["hypernyms"] == "n02083346 n01317541"
    assert row["lexname"] == "noun.animal" and row["synset_offset"] == 2084071
    assert FIXTURE.read_text().splitlines()[row["source_row"]].startswith("02084071 ")
    con = open_catalog(tmp_path / "out" / "catalog.duckdb")
    q = con.execute("SELECT source_row, field, reason, raw FROM quarantine ORDER BY source_row").fetchall()
    kinds = dict(con.execute("SELECT source_kind, count(*) FROM texts GROUP BY 1").fetchall())
    con.close()
    assert [(r, f, why) for r, f, why, _ in q] == [
        (38, "w_cnt", "malformed_wordnet"),
        (49, "pointer_offset", "malformed_wordnet"),
        (57, "p_cnt", "malformed_wordnet"),
    ]
    assert q[0][3] == FIXTURE.read_text().splitlines()[38]  # the raw line
    assert kinds == {"wn_lemmas": 31, "wn_definition": 31, "wn_example": n_texts - 62}


def test_hypernym_views_pair_a_synset_with_its_parents_lemmas(tmp_path):
    """Issue 42's hierarchy-only control: `wn_hypernym` is derived at the views stage from the
    ingested corpus: per synset, the lemma list of its first hypernym the corpus holds. With
    good_sources [wn_lemmas, wn_hypernym] a synset's two views are its lemmas and its parent's;
    synsets whose parents are not in the corpus have one text and are left out, counted."""
    from platonic.core.config import ViewsConfig
    from platonic.core.views import build_views

    ingest_corpus(resolve_sources([str(FIXTURE)], "wordnet"), _config(), tmp_path / "c", tmp_path / "cache")
    corpus = next((tmp_path / "c" / "texts").glob("*/data.parquet"))
    rows = pq.read_table(corpus).to_pylist()
    lemmas = {r["image_id"]: r for r in rows if r["source_kind"] == "wn_lemmas"}
    cfg = ViewsConfig(good_sources=["wn_lemmas", "wn_hypernym"], text_sources=["wn_lemmas"], vocab_size=64)
    (tmp_path / "v").mkdir()
    counts = build_views(corpus, cfg, tmp_path / "v")
    good = {r["image_id"]: r["texts"] for r in pq.read_table(tmp_path / "v" / "good_views.parquet").to_pylist()}
    expected = {}
    for wnid, r in lemmas.items():
        parent = next((p for p in (r["hypernyms"] or "").split() if p in lemmas), None)
        if parent is not None:
            expected[wnid] = [r["text"], lemmas[parent]["text"]]
    assert expected and {w: sorted(t) for w, t in good.items()} == {w: sorted(t) for w, t in expected.items()}
    assert good["n02084071"][1] == lemmas["n02083346"]["text"]  # dog -> canine, its first hypernym
    assert counts["good_images"] + counts["images_too_few_texts"] == len(lemmas)
    # a corpus without WordNet's hypernyms column cannot derive it: one clear error
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(corpus).drop(["hypernyms"]), plain)
    with pytest.raises(ValueError, match="wn_hypernym.*hypernyms"):
        build_views(plain, cfg, tmp_path / "v")


def test_reader_counts_the_license_lines_it_skips():
    reader = WordNetReader(_config())
    shard = resolve_sources([str(FIXTURE)], "wordnet")[0]
    rows = sum(b.rows.num_rows for b in reader.batches(shard))
    assert reader.header_lines[shard.id] == 29
    d = read_data_file(FIXTURE)
    assert rows == len(d.synsets) + sum(len(s.examples) for s in d.synsets) + len(d.malformed)


@pytest.mark.skipif(not REAL.is_file(), reason="WordNet 3.0 is not installed (apt-get install wordnet-base)")
def test_real_wordnet_noun_file():
    d = read_data_file(REAL)
    assert len(d.synsets) == 82_115 and d.header_lines == 29 and d.malformed == []
    by = {s.wnid: s for s in d.synsets}
    assert by["n02084071"].lemma_text == "dog, domestic dog, Canis familiaris"
    # every hypernym pointer lands on a synset of the file
    assert all(h in by for s in d.synsets for h in s.hypernyms)


def test_the_one_regex_reading_agrees_with_the_token_walk_on_every_fixture_line():
    for line in FIXTURE.read_text().splitlines()[29:]:
        try:
            fast = parse_data_line(line)
        except MalformedLine:
            continue
        assert fast == _parse_tokens(line)


def test_a_verb_line_with_frames():
    verb = (
        "00001740 29 v 04 breathe 0 take_a_breath 0 respire 0 suspire 3 002 * 00005041 v 0000 "
        '@ 00004227 v 0000 02 + 02 00 + 08 00 | draw air into, and expel out of, the lungs; "I can breathe better"  '
    )
    s = parse_data_line(verb)
    assert s.wnid == "v00001740" and s.lexname == "verb.body" and s.hypernyms == ("v00004227",)
    assert s.examples == ("I can breathe better",)
    with pytest.raises(MalformedLine) as e:
        parse_data_line(verb.replace(" 02 + 02 00", " 03 + 02 00"))
    assert e.value.field == "frame"
