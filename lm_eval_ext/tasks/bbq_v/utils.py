"""lm-eval hooks of the BBQ-V task (``!function utils.*``; absolute imports only).

The prompt is the BBQ one (same tiers, same JSON answer format and parser) with the image
first: ``<image>`` (lm-eval's placeholder, replaced by the model's image token or placed as an
image part by the chat template), then the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import datasets

from lm_eval_ext.data.bbq_v import fingerprint, load_bbq_v
from lm_eval_ext.tasks.bbq import prompts as bbq_prompts
from lm_eval_ext.tasks.common.prompting import ChoiceItems
from lm_eval_ext.tasks.common.scoring import generative_metrics

IMAGE_PLACEHOLDER = "<image>"


def _explanation(row: Mapping[str, Any]) -> str:
    return f"The image and context support {bbq_prompts.options(row)[row['label']].lower()}."


ITEMS = ChoiceItems(bbq_prompts.STYLE, bbq_prompts.body, options=bbq_prompts.options,
                    label=lambda r: r["label"], explanation=_explanation,
                    stratum=lambda r: r["category"], pool_size=2)


def load_docs(bbq_v_dir: str | None = None, hf_dataset: str | None = None,
              hf_revision: str | None = None, template_tier: str | None = None,
              **_: Any) -> datasets.DatasetDict:
    """``custom_dataset``: BBQ-V items, image first.

    The rows of 2 scenarios are held out as the few-shot pool (scenario-level, so no test item
    shares a scenario with a shot).
    """
    rows = load_bbq_v(bbq_v_dir, hf_dataset, hf_revision)
    sha = fingerprint(rows)
    pool = ITEMS.held_out_pool(rows)
    pooled_units = {r["unit_id"] for r in pool}
    test = [r for r in rows if r["unit_id"] not in pooled_units]
    splits = ITEMS.splits(test, "generative", template_tier, pool=pool)
    return splits.map(lambda doc: {"prompt": f"{IMAGE_PLACEHOLDER}\n{doc['prompt']}",
                                   "sample_sha256": sha})


def doc_to_image(doc: Mapping[str, Any]) -> list:
    """The item's image as a PIL image (from the prepared folder or the dataset)."""
    if doc.get("image") is not None:
        return [doc["image"]]
    from PIL import Image

    with Image.open(doc["image_path"]) as image:
        return [image.convert("RGB")]


def process_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict:
    """Acc (failures wrong), acc_parsed, parse rates."""
    out, pred = generative_metrics(doc, results)
    return {**out, "acc_parsed": None if pred is None else out["acc"]}
