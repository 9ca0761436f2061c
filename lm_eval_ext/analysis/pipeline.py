"""``analyze``: reference + runs (+ grid) -> paired deltas, subgroups, memberships, power, flips.

The steps live beside it: :mod:`~lm_eval_ext.analysis.grid` (``--grid``: rank flips),
:mod:`~lm_eval_ext.analysis.comparisons` (agreement and power per run) and
:mod:`~lm_eval_ext.analysis.run_table` (settings, costs and card differences per run).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from lm_eval_ext.analysis.claims import claim_table
from lm_eval_ext.analysis.clustering import cluster_column, clustering_sensitivity
from lm_eval_ext.analysis.comparisons import add_power, comparison_row
from lm_eval_ext.analysis.errors import AnalysisInputError, DegenerateDataWarning
from lm_eval_ext.analysis.grid import grid_analysis
from lm_eval_ext.analysis.loader import (
    check_run_name,
    distinct_labels,
    load_runs,
    split_run_argument,
)
from lm_eval_ext.analysis.membership import membership_sensitivity
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, paired_metrics
from lm_eval_ext.analysis.pairing import (
    align,
    aligned_items,
    how_runs_differ,
    refuse_repeated_runs,
)
from lm_eval_ext.analysis.run_table import card_differences, run_table
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign, as_rng
from lm_eval_ext.analysis.stats.paired import paired_deltas
from lm_eval_ext.analysis.stats.subgroups import benjamini_hochberg, holm, subgroup_masks


@dataclass
class AnalysisResult:
    """Every table the report is made of."""

    reference_id: str
    run_ids: list[str]
    n_items: int
    n_clusters: int
    dropped: dict[str, int]
    items: pd.DataFrame
    runs: pd.DataFrame
    deltas: pd.DataFrame
    comparisons: pd.DataFrame
    membership_summary: pd.DataFrame
    membership_draws: pd.DataFrame
    membership_frozen: pd.DataFrame
    rank_flips: pd.DataFrame | None
    rankings: pd.DataFrame | None
    variance_shares: pd.DataFrame | None
    settings: dict[str, Any]
    cards: dict[str, dict[str, Any]] | None = None  # run -> task -> disclosure card
    card_differences: pd.DataFrame | None = None
    claims: pd.DataFrame | None = None  # claim sentences and their stability
    #: overall verdicts under unit and template clustering (BBQ only; see analysis.clustering)
    clustering: pd.DataFrame | None = None
    #: each grid condition's model ordering against the consensus (with ``--grid``)
    grid_orderings: pd.DataFrame | None = None


def _frozen_memberships() -> dict[str, set[str]]:
    from lm_eval_ext.data.instrument import load_manifest

    return {name: set(rec["unit_ids"]) for name, rec in load_manifest()["memberships"].items()}


def _adjust(deltas: pd.DataFrame) -> pd.DataFrame:
    deltas["p_adjusted"] = np.nan
    deltas["p_adjusted_bh"] = np.nan
    for _, index in deltas.groupby(["run", "metric", "subgroup_type"]).groups.items():
        p = deltas.loc[index, "p_value"].to_numpy(float)
        deltas.loc[index, "p_adjusted"] = holm(p)
        deltas.loc[index, "p_adjusted_bh"] = benjamini_hochberg(p)
    return deltas


def check_settings(*, n_resamples: int, mc_draws: int, seed: int, level: float) -> None:
    """Reject settings that would crash late or give meaningless intervals."""
    if n_resamples < 100 or mc_draws < 10:
        raise AnalysisInputError(f"--bootstrap must be >= 100 and --mc-draws >= 10 (got "
                                 f"{n_resamples} and {mc_draws})")
    if not 0.5 <= level < 1:
        raise AnalysisInputError(f"--level {level} is not a confidence level; use a value in "
                                 "[0.5, 1), e.g. --level 0.95")
    if seed < 0:
        raise AnalysisInputError(f"--seed {seed} is negative; use a seed >= 0")


def _check_judged_alike(specs: Sequence[Any], items: dict[str, pd.DataFrame],
                        loglik: set[str]) -> None:
    """A judge metric needs judge scores in every run (a paired delta against nothing is not one).

    ``loglik``: the runs scored by log-likelihood, which generate no reasoning to judge.
    """
    for spec in specs:
        column = spec.valid_column
        missing = [run for run, frame in items.items() if column and column not in frame]
        unjudgeable = [run for run in missing if run in loglik]
        if unjudgeable:
            raise AnalysisInputError(
                f"{column} is in some runs but not in {', '.join(missing)}: "
                f"{', '.join(unjudgeable)} scored by log-likelihood, which generates no "
                "reasoning to judge; compare judged runs with a generative reference of their "
                "items (lm_eval ... --log_samples, then `lm-eval-ext judge RUN_DIR`)")
        if missing:
            raise AnalysisInputError(
                f"{column} is in some runs but not in {', '.join(missing)}: judge every run "
                "(`lm-eval-ext judge RUN_DIR`, same rubrics) or compare unjudged runs")


def analyze(reference: str | Path, runs: Sequence[str | Path], *,
            grid: Sequence[str | Path] | None = None, core: dict[str, list[str]] | None = None,
            intersection: bool = False, n_resamples: int = 10_000, mc_draws: int = 1_000,
            seed: int = 0, level: float = 0.95, template_sd_pp: float | None = None,
            progress: bool = True, labels: Sequence[str] | None = None,
            cluster: str = "unit") -> AnalysisResult:
    """Compare ``runs`` with ``reference`` on their paired items.

    Args:
        reference: The reference run (e.g. full benchmark, bf16, batch 1).
        runs: Cheaper variants to compare with it.
        grid: Runs of several models x configurations for the rank-flip analysis.
        core: A sub-envelope of the grid, e.g. ``{"template_tier": ["minimal", "detailed"]}``.
        intersection: Compare the items all runs share instead of requiring equal item sets.
        n_resamples: Cluster bootstrap / permutation resamples.
        mc_draws: Monte Carlo natural-unit draws per subset size.
        seed: Seed of every random step (recorded in the report).
        level: Confidence level of the intervals.
        template_sd_pp: Prompt-template SD (points) for the template variant of QRI.
        progress: Show progress bars on the long steps.
        labels: Labels of the reference and the runs, in order (default: ``NAME=PATH`` names,
            else ``model@precision/bsN/subset``).
        cluster: The resampling unit: ``unit`` (natural unit) or ``template`` (BBQ's category x
            question_index, shared by several units); the other one is reported beside it.
    """
    check_settings(n_resamples=n_resamples, mc_draws=mc_draws, seed=seed, level=level)
    column = cluster_column(cluster)
    rng = as_rng(seed)
    if labels is not None and len(labels) != 1 + len(runs):
        raise AnalysisInputError(f"{len(labels)} labels for the reference and {len(runs)} runs; "
                                 "give one label each, reference first")
    for label in labels or ():
        check_run_name(label, "--label")
    given = list(labels) if labels else [split_run_argument(r)[0] for r in [reference, *runs]]
    twice = sorted({n for n in given if n is not None and given.count(n) > 1})
    if twice:
        raise AnalysisInputError(f"two runs share the name {twice[0]}; give each its own "
                                 "NAME=PATH (or --label)")
    [ref_run] = load_runs([reference], labels=labels[:1] if labels else None)
    other = load_runs(runs, labels=labels[1:] if labels else None) if runs else []
    distinct_labels([ref_run, *other])
    if not other:
        raise AnalysisInputError("give at least one run to compare with the reference")
    refuse_repeated_runs([ref_run, *other])
    for run in other:
        differs = how_runs_differ(ref_run, run)
        if differs:  # allowed (e.g. both scoring paths of one item set), but said
            warnings.warn(f"{run.run_id} is not the reference's design ({differs}): its deltas "
                          "mix the protocol change with that difference", DegenerateDataWarning,
                          stacklevel=2)
    flips, rankings, shares, orderings = (
        grid_analysis(grid, core, n_resamples, np.random.default_rng(seed), level) if grid
        else (None, None, None, None))
    alignment = align(ref_run, other, intersection=intersection)
    ref_items = aligned_items(ref_run, alignment)
    run_items = {r.run_id: aligned_items(r, alignment) for r in other}
    specs = paired_metrics([ref_items, *run_items.values()])
    _check_judged_alike(specs, {ref_run.run_id: ref_items, **run_items},
                        {r.run_id for r in [ref_run, *other] if r.info["scoring_path"] == "loglik"})
    design = ClusterDesign.build(ref_items[column], n_resamples, rng)
    groups = list(subgroup_masks(ref_items))
    masks = np.column_stack([mask for _, _, mask in groups])

    delta_rows, comparison_rows = [], []
    steps = tqdm(total=len(other) * len(specs), desc="paired deltas", disable=not progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        for run in other:
            items = run_items[run.run_id]
            for spec in specs:
                results = paired_deltas(spec, ref_items, items, design, masks, level)
                for (subgroup_type, subgroup, _), d in zip(groups, results, strict=False):
                    delta_rows.append({
                        "run": run.run_id, "metric": spec.name, "subgroup_type": subgroup_type,
                        "subgroup": subgroup, "n": d.n, "n_clusters": d.n_clusters,
                        "reference": d.reference, "value": d.value,
                        "delta_pp": spec.scale * d.statistic, "ci_low": spec.scale * d.ci.low,
                        "ci_high": spec.scale * d.ci.high, "p_value": d.pvalue, "test": d.test,
                        "p_value_mcnemar": d.pvalue_mcnemar,
                        "undefined_resample_share": d.undefined_resample_share,
                        "value_ci_low": d.value_ci.low, "value_ci_high": d.value_ci.high,
                        "reference_ci_low": d.reference_ci.low,
                        "reference_ci_high": d.reference_ci.high})
                steps.update()
            comparison_rows.append(comparison_row(ref_items, items, run.run_id, design.codes))
    steps.close()
    deltas = _adjust(pd.DataFrame(delta_rows))

    # memberships are sets of natural units, whatever the resampling unit of the deltas
    unit_codes = np.unique(ref_items["unit_id"].astype(str), return_inverse=True)[1]
    membership = [membership_sensitivity(spec, ref_items, unit_codes, n_draws=mc_draws,
                                         rng=rng, frozen=_frozen_memberships())
                  for spec in (ACCURACY, BIAS_S_DIS, BIAS_S_AMB) if spec in specs]
    summary = pd.concat([m.summary for m in membership], ignore_index=True)
    draws = pd.concat([m.draws for m in membership], ignore_index=True)
    frozen = pd.concat([m.frozen for m in membership], ignore_index=True)
    comparisons = add_power(pd.DataFrame(comparison_rows), deltas, summary,
                            design.n_clusters, alignment.n, template_sd_pp)

    all_items = pd.concat([ref_items.assign(run=ref_run.run_id), *run_items.values()],
                          ignore_index=True)
    runs_frame = run_table(ref_run, other)
    joules = runs_frame["energy_joules"]
    cards = {r.run_id: next(iter(r.cards.values()), {}) for r in [ref_run, *other]}
    claims = claim_table(specs, ref_items, run_items, deltas, design, _frozen_memberships(),
                         level, None if joules.isna().any() else float(joules.sum()),
                         reference_id=ref_run.run_id, cards=cards, mc_draws=mc_draws, rng=rng)
    clustering = clustering_sensitivity(specs, ref_items, run_items, deltas, cluster,
                                        n_resamples=n_resamples, rng=rng, level=level)
    return AnalysisResult(
        ref_run.run_id, [r.run_id for r in other], alignment.n, design.n_clusters,
        alignment.dropped, all_items, runs_frame, deltas, comparisons, summary,
        draws, frozen, flips, rankings, shares,
        {"n_resamples": n_resamples, "mc_draws": mc_draws, "seed": seed, "level": level,
         "intersection": intersection, "cluster": cluster},
        {r.run_id: r.cards for r in [ref_run, *other]}, card_differences(ref_run, other),
        claims, clustering, orderings)

