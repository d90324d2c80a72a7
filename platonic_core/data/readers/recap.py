"""Recap-DataComp-1B parquet: org_caption -> alt, re_caption (+ the diverse top-k
recaption when present) -> recap; key = image id; url, sha256, scores provenance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .base import MISMATCH, Batch, Reader, Shard, TextField, mapped_fields
from .sources import open_native

if TYPE_CHECKING:
    from ...config import IngestConfig

RECAP_TEXTS = {"org_caption": "alt", "re_caption": "recap", "re_caption_condition_diverse_topk": "recap"}
RECAP_OPTIONAL = {"re_caption_condition_diverse_topk"}


class RecapReader(Reader):
    format = "recap"

    def __init__(self, cfg: IngestConfig):
        super().__init__(cfg)
        self.id_column = cfg.id_column or "key"
        self.text_columns = cfg.text_columns or RECAP_TEXTS

    @property
    def fields(self) -> list[TextField]:
        optional = RECAP_OPTIONAL if not self.cfg.text_columns else set()
        return mapped_fields(self.text_columns, self.cfg.index_column, optional)

    def batches(self, shard: Shard) -> Iterator[Batch]:
        with open_native(shard.uri) as fh:
            # no pre-buffering: with it Arrow keeps every column chunk it read until the file
            # is closed (RSS grows with the shard); plain buffered reads stay bounded
            pf = pq.ParquetFile(fh, pre_buffer=False, buffer_size=1 << 20)
            schema = pf.schema_arrow
            names = set(schema.names)
            row = 0
            for rb in pf.iter_batches(batch_size=self.batch_rows):
                n = rb.num_rows
                cols: dict[str, pa.Array] = {}
                if self.id_column in names:
                    ids = rb.column(self.id_column)
                    if (
                        pa.types.is_string(ids.type)
                        or pa.types.is_large_string(ids.type)
                        or pa.types.is_integer(ids.type)
                    ):
                        cols["image_id"] = ids.cast(pa.string())
                    else:
                        cols["image_id"] = pa.nulls(n, pa.string())
                        cols[MISMATCH + "image_id"] = pa.array(np.ones(n, bool))
                else:  # the file has no id column at all
                    cols["image_id"] = pa.nulls(n, pa.string())
                    cols[MISMATCH + "image_id"] = pa.array(np.ones(n, bool))
                cols["source_row"] = pa.array(np.arange(row, row + n, dtype=np.int64))
                for f in self.fields:
                    if f.column not in names:
                        if not f.optional:
                            cols[f.column] = pa.nulls(n, pa.string())
                            cols[MISMATCH + f.column] = pa.array(np.ones(n, bool))
                        continue
                    v = rb.column(f.column)
                    if pa.types.is_large_string(v.type) or pa.types.is_large_binary(v.type):
                        v = v.cast(pa.string() if pa.types.is_large_string(v.type) else pa.binary())
                    if not (pa.types.is_string(v.type) or pa.types.is_binary(v.type)):
                        try:
                            v = v.cast(pa.string())
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                            v = pa.array(
                                [None if x is None else json.dumps(x, default=str) for x in v.to_pylist()], pa.string()
                            )
                        cols[MISMATCH + f.column] = pc.is_valid(v)
                    cols[f.column] = v
                text_cols = {f.column for f in self.fields}
                for name in schema.names:
                    if name not in text_cols and name not in cols:
                        cols[name] = rb.column(name)
                row += n
                yield Batch(pa.table(cols))
