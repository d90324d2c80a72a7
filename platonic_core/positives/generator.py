"""The generator interface: a `Generator` answers recaption / paraphrase requests in process
(the synthetic world's `WorldGenerator` is one), and `generate_positives` runs it over a
whole corpus: alt-texts in, texts.parquet (+ failures.parquet) out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from ..data.schema import QUARANTINE_SCHEMA, text_table
from ..progress import bar

if TYPE_CHECKING:
    from ..config import PositivesConfig


class Generator(Protocol):
    name: str
    model: str

    def recaption(self, image_ids: list[str], index: int) -> list[str | None]:
        """The `index`-th caption of each image (None = failed generation)."""

    def paraphrase(self, texts: list[str], image_ids: list[str], index: int) -> list[str | None]:
        """The `index`-th paraphrase of each text; sees the text only."""

    def params(self, task: str) -> dict:
        """Provenance: prompt digest, sampling parameters, seed."""


def generate_positives(
    corpus: Path, gen: Generator, cfg: PositivesConfig, out: Path, batch: int = 512
) -> dict[str, int]:
    """corpus (alt-texts) + generated recaptions/paraphrases -> texts.parquet.

    Failed generations go to failures.parquet with a reason; counts add up:
    requested == generated + failed.
    """
    src = pq.read_table(corpus).to_pylist()
    rows = [dict(r) for r in src]
    failures = []
    alts = [r for r in src if r["source_kind"] == "alt"]
    image_ids = sorted({r["image_id"] for r in src})
    requested = 0
    jobs = [("recap", i) for i in range(cfg.recaptions)] + [("paraphrase", i) for i in range(cfg.paraphrases)]
    total = sum(len(image_ids if task == "recap" else alts) for task, _ in jobs)
    texts_bar = bar(desc="positives", unit="text", total=total)
    for task, index in jobs:
        params = json.dumps(gen.params(task), sort_keys=True)
        items = image_ids if task == "recap" else alts
        for s in range(0, len(items), batch):
            texts_bar.update(min(batch, len(items) - s))
            chunk = items[s : s + batch]
            if task == "recap":
                outs = gen.recaption(chunk, index)
                ids = chunk
            else:
                outs = gen.paraphrase([r["text"] for r in chunk], [r["image_id"] for r in chunk], index)
                ids = [r["image_id"] for r in chunk]
            requested += len(chunk)
            for k, (image_id, text) in enumerate(zip(ids, outs, strict=True)):
                src_row = s + k
                if text is None or not str(text).strip():
                    failures.append(
                        {
                            "source_uri": f"{task}:{gen.name}",
                            "source_row": src_row,
                            "field": "text",
                            "reason": "empty_output" if text is not None else "failed",
                            "raw": image_id,
                        }
                    )
                    continue
                rows.append(
                    {
                        "image_id": image_id,
                        "text_id": f"{image_id}:{task}:{index}",
                        "source_kind": task,
                        "text": " ".join(str(text).split()),
                        "source_uri": f"{task}:{gen.name}",
                        "source_row": src_row,
                        "generator": gen.name,
                        "generator_model": gen.model,
                        "generator_params": params,
                    }
                )
    texts_bar.close()
    pq.write_table(text_table(rows), out / "texts.parquet")
    pq.write_table(pa.Table.from_pylist(failures, schema=QUARANTINE_SCHEMA), out / "failures.parquet")
    counts = {
        "input_texts": len(src),
        "requested": requested,
        "generated": len(rows) - len(src),
        "failed": len(failures),
        "texts": len(rows),
    }
    assert counts["requested"] == counts["generated"] + counts["failed"], counts
    return counts
