"""Saving a trained encoder as an MLflow transformers model prints no model-card or license
warnings (ours are trained here and have neither); errors still show, the level is restored."""

from __future__ import annotations

import logging

import mlflow.transformers

from platonic.tasks.tracking import no_model_card_warnings


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_model_card_lookup_warns_outside_and_is_quiet_inside(tmp_path):
    logger = logging.getLogger("mlflow.transformers")
    seen = Records()
    logger.addHandler(seen)
    try:
        mlflow.transformers._fetch_model_card("")  # what save_model asks for a model of ours
        assert any("model card" in r.getMessage() for r in seen.records), seen.records
        seen.records.clear()
        level = logger.level
        with no_model_card_warnings():
            mlflow.transformers._fetch_model_card("")
            mlflow.transformers._write_license_information("", None, tmp_path)
            logger.error("a real failure")
        assert [r.getMessage() for r in seen.records] == ["a real failure"]
        assert logger.level == level
    finally:
        logger.removeHandler(seen)
