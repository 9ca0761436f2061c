"""Upstream XSTest glue: keep the evaluated prompts and render lm-eval-ext's prompt."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

#: the rendered prompt with \x00prompt\x00 where the request goes (filled at export)
PROMPT_TEMPLATE = ""
#: the CSV of the evaluated prompt ids (filled at export)
ITEMS_FILE = ""


def _ids() -> set[int]:
    path = Path(__file__).with_name(ITEMS_FILE)
    with open(path, encoding="utf-8", newline="") as handle:
        return {int(row["id"]) for row in csv.DictReader(handle)}


def process_docs(dataset):
    """Keep the evaluated prompts (the few-shot pool is left out) and add the fields."""
    ids = _ids()

    def prepare(row: dict[str, Any]) -> dict[str, Any]:
        return {"item_key": f"xstest:{int(row['id'])}", "safety_label": row["label"],
                "prompt": PROMPT_TEMPLATE.replace("\x00prompt\x00", row["prompt"]),
                "target": ""}  # a shot's target is its reference response

    return dataset.filter(lambda row: int(row["id"]) in ids).map(prepare)  # file order = ours
