"""Upstream BBQ glue: select the exported membership and render lm-eval-ext's prompt."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lm_eval_ext.tasks.common.answer_parser import LETTERS

#: the rendered prompt with \x00FIELD\x00 where each item's text goes (filled at export)
PROMPT_TEMPLATE = ""
#: the CSV of the membership's items and their derived fields (filled at export)
ITEMS_FILE = ""
#: text fields that the prompt shows stripped of surrounding white space
STRIPPED = ("context", "question")


def _items() -> dict[tuple[str, int], dict[str, Any]]:
    """The membership's items in their evaluation order (``order``), by (category, id)."""
    path = Path(__file__).with_name(ITEMS_FILE)
    with open(path, encoding="utf-8", newline="") as handle:
        return {(row["category"], int(row["example_id"])): {**row, "order": order}
                for order, row in enumerate(csv.DictReader(handle))}


def _optional_int(text: str) -> int | None:
    return int(text) if text not in ("", None) else None


def render(row: dict[str, Any]) -> str:
    """The prompt of one upstream BBQ row (lm-eval-ext's text for the exported tier)."""
    prompt = PROMPT_TEMPLATE
    for name in ("context", "question", "ans0", "ans1", "ans2"):
        value = str(row[name])
        prompt = prompt.replace(f"\x00{name}\x00", value.strip() if name in STRIPPED else value)
    return prompt


def process_docs(dataset):
    """Keep the membership's rows, in lm-eval-ext's order, with the fields the metrics read."""
    items = _items()

    def prepare(row: dict[str, Any]) -> dict[str, Any]:
        derived = items[(row["category"], int(row["example_id"]))]
        return {"item_key": f"bbq:{row['category']}:{int(row['example_id'])}",
                "unit_id": derived["unit_id"], "options": [row[f"ans{i}"] for i in range(3)],
                "target_loc": _optional_int(derived["target_loc"]),
                "unknown_loc": int(derived["unknown_loc"]), "prompt": render(row),
                "target": LETTERS[int(row["label"])], "order": derived["order"]}

    kept = dataset.filter(lambda row: (row["category"], int(row["example_id"])) in items)
    return kept.map(prepare).sort("order")
