"""The comparisons table: per run, agreement with the reference, McNemar, discordance and power.

Also the pre-registration cards the report writes from it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.stats.paired import answer_agreement, mcnemar_exact, transitions
from lm_eval_ext.analysis.stats.power import (
    binomial_sd,
    design_effect,
    discordance_rate,
    paired_mde,
    preregistration_card,
    qri,
    usable_design_effect,
)


def comparison_row(ref_items: pd.DataFrame, items: pd.DataFrame, run_id: str,
                   codes: np.ndarray) -> dict[str, Any]:
    """One run's row: answer and correctness agreement, transitions, McNemar, rho_d, deff."""
    ref_c, run_c = ref_items["correct"].to_numpy(bool), items["correct"].to_numpy(bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        test = mcnemar_exact(ref_c, run_c)
    return {"run": run_id, "n": len(items), "answer_agreement": answer_agreement(
                ref_items["answer"], items["answer"]),
            "correctness_agreement": float(np.mean(ref_c == run_c)),
            **transitions(ref_c, run_c), "mcnemar_b": test.b, "mcnemar_c": test.c,
            "mcnemar_p": test.pvalue, "rho_d": discordance_rate(ref_c, run_c),
            "design_effect": design_effect(run_c.astype(float) - ref_c, codes),
            "identical_reasoning_share": float(np.mean(
                ref_items["reasoning"].fillna("\0").to_numpy()
                == items["reasoning"].fillna("\1").to_numpy()))}


def add_power(comparisons: pd.DataFrame, deltas: pd.DataFrame, membership: pd.DataFrame,
              n_clusters: int, n_items: int, template_sd_pp: float | None) -> pd.DataFrame:
    """MDE at the observed discordance and design effect; split-half SD; QRI (accuracy).

    The MDE uses the natural-unit design effect of the paired differences (the unit of the CI
    and the test), floored at 1 and 1 when undefined (e.g. no discordance). The split SD is the SD of accuracy
    over the Monte Carlo natural-unit draws of half the units, drawn without replacement from
    the reference's own items; its item-level reference is therefore the hypergeometric SD
    (binomial x finite-population correction) at the same item count, like with like. Their
    ratio squared is the split's own design effect.
    """
    overall = deltas[(deltas["subgroup_type"] == "all") & (deltas["metric"] == "accuracy")]
    half = membership[(membership["metric"] == "accuracy")
                      & (membership["size_units"] == int(0.5 * n_clusters))]
    sigma_split = float(half["sd_pp"].iloc[0]) if not half.empty else math.nan
    half_items = int(half["size_items"].iloc[0]) if not half.empty else 0
    rows = []
    for _, row in comparisons.iterrows():
        acc = overall[overall["run"] == row["run"]]
        delta_pp = float(acc["delta_pp"].iloc[0]) if not acc.empty else math.nan
        ref_p = float(acc["reference"].iloc[0]) if not acc.empty else math.nan
        rho, deff = row["rho_d"], usable_design_effect(row["design_effect"])
        rows.append({
            **row,
            "mde_pp_at_observed_rho_d": 100 * paired_mde(int(row["n"]), rho, design_effect=deff)
            if rho > 0 else np.nan,
            "split_half_sd_pp": sigma_split, "split_half_items": half_items,
            "split_half_hypergeometric_sd_pp": 100 * binomial_sd(ref_p, half_items, n_items)
            if half_items and np.isfinite(ref_p) else np.nan,
            "qri": qri(delta_pp, sigma_split),
            "qri_with_templates": qri(delta_pp, sigma_split, template_sd_pp)
            if template_sd_pp is not None else np.nan,
        })
    return pd.DataFrame(rows)


def preregistration_cards(comparisons: pd.DataFrame) -> str:
    """One five-line card per run, planning a replication at the observed discordance.

    The MDE is in the unit of the analysis: natural-unit clusters, through the observed design
    effect of the paired differences (1 where it is undefined).
    """
    parts = []
    for _, row in comparisons.iterrows():
        rho = max(float(row["rho_d"]), 1e-6)
        deff = usable_design_effect(float(row["design_effect"]))
        parts.append(f"### {row['run']}\n\n" + preregistration_card(
            mde_pp=100 * paired_mde(int(row["n"]), rho, design_effect=deff), rho_d=rho,
            m=int(row["n"]), design_effect=deff))
    return "\n".join(parts)

