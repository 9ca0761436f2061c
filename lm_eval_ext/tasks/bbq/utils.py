"""lm-eval hooks of the BBQ tasks (referenced from the YAMLs with ``!function utils.*``).

Absolute imports only: lm-eval loads this file by path, so relative imports would fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import datasets

from lm_eval_ext.data.bbq import derived_rows, joined, load_bbq_rows
from lm_eval_ext.data.external_manifest import load_manifest_rows
from lm_eval_ext.data.instrument import load_manifest
from lm_eval_ext.data.instrument import load_membership as _load_membership
from lm_eval_ext.errors import ManifestError
from lm_eval_ext.tasks.bbq import prompts
from lm_eval_ext.tasks.bbq.results import (  # noqa: F401 (the YAMLs name them as utils.*)
    agg_acc_ambig,
    agg_acc_disambig,
    agg_acc_parsed,
    agg_s_amb,
    agg_s_dis,
    process_results_generative,
    process_results_loglik,
)
from lm_eval_ext.tasks.common import prompting
from lm_eval_ext.tasks.common.prompting import ChoiceItems, fewshot_pool

FEWSHOT_POOL_SIZE = 22  # 2 per category, from units outside the frozen instrument


def context_condition(row: Mapping[str, Any]) -> str:
    """The kind the few-shot pool alternates: ambiguous and disambiguated rows.

    An ambiguous row's answer is always "unknown", so three ambiguous shots (the pool before
    task version 2.1) taught that answer.
    """
    return str(row["context_condition"])


@lru_cache(maxsize=8)
def _pool_rows(evaluated_units: frozenset[str]) -> tuple[Mapping[str, Any], ...]:
    """22 rows (2 per category, one per unit) outside the instrument and the evaluated units.

    Ambiguous and disambiguated rows alternate (:func:`context_condition`): 3 shots show 2 and 1,
    5 shots 3 and 2, and each category gives one of each.

    The same pool serves every instrument membership; ``bbq_full`` has no outside units, so
    its few-shot pool is empty (``--num_fewshot`` > 0 is then an lm-eval error).
    """
    instrument = set(load_manifest()["memberships"]["instrument"]["unit_ids"])
    return derived_rows(  # cached: the pool is drawn from all 58,492 rows
        [b"fewshot pool", Path(__file__).read_bytes(), Path(prompting.__file__).read_bytes(),
         joined(instrument), joined(evaluated_units), str(FEWSHOT_POOL_SIZE).encode()],
        lambda: tuple(fewshot_pool(load_bbq_rows(), exclude=instrument | evaluated_units,
                                   size=FEWSHOT_POOL_SIZE, stratum=lambda r: r["category"],
                                   unit=lambda r: r["unit_id"], alternate=context_condition)))


ITEMS = ChoiceItems(style=prompts.STYLE, body=prompts.body, options=prompts.options,
                    label=lambda row: row["label"], explanation=prompts.explanation,
                    stratum=lambda row: row["category"], pool_size=FEWSHOT_POOL_SIZE)


def _splits(rows: Iterable[Mapping[str, Any]], scoring_path: str, template_tier: str | None
            ) -> datasets.DatasetDict:
    rows = list(rows)
    pool = _pool_rows(frozenset(r["unit_id"] for r in rows))
    return ITEMS.splits(rows, scoring_path, template_tier, pool=pool)


def load_membership(membership: str, scoring_path: str = "generative",
                    template_tier: str | None = None, membership_sha256: str | None = None,
                    **_: Any) -> datasets.DatasetDict:
    """``custom_dataset`` of the packaged tasks: one verified membership as a test split.

    Args:
        membership: Name in the committed manifest (``instrument``, ``25pct``, ``50pct_r3``,
            ...) or ``full`` for all 58,492 rows. Set through ``dataset_kwargs``.
        scoring_path: ``generative`` or ``loglik`` (set by the task YAML).
        template_tier: ``minimal``, ``role``, ``detailed`` or ``cot`` (``--metadata``).
        membership_sha256: Fingerprint the task YAML expects (from ``metadata``); a
            mismatch with the manifest means the YAML and manifest drifted apart.
    """
    loaded = _load_membership(membership)
    if membership_sha256 is not None and membership_sha256 != loaded.membership_sha256:
        raise ManifestError(
            f"task expects membership {membership!r} with fingerprint {membership_sha256}, "
            f"but the manifest gives {loaded.membership_sha256}; reinstall lm-eval-ext.")
    return _splits(loaded.rows, scoring_path, template_tier)


def load_registered_manifest(manifest_csv: str, sample_sha256: str,
                             scoring_path: str = "generative", template_tier: str | None = None,
                             **_: Any) -> datasets.DatasetDict:
    """``custom_dataset`` of tasks registered with ``lm-eval-ext data fingerprint --register``."""
    rows = load_manifest_rows(manifest_csv, expected_sample_sha256=sample_sha256)
    return _splits(rows, scoring_path, template_tier)
