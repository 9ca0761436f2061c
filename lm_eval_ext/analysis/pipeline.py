"""``analyze``: reference + runs (+ grid) -> paired deltas, subgroups, memberships, power, flips."""

from __future__ import annotations

import difflib
import math
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
from lm_eval_ext.analysis.errors import AnalysisInputError, DegenerateDataWarning
from lm_eval_ext.analysis.loader import Run, distinct_labels, load_runs
from lm_eval_ext.analysis.membership import membership_sensitivity
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, paired_metrics
from lm_eval_ext.analysis.pairing import (
    align,
    aligned_items,
    how_runs_differ,
    refuse_repeated_runs,
)
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign, as_rng
from lm_eval_ext.analysis.stats.paired import answer_agreement, mcnemar_exact, paired_deltas, transitions
from lm_eval_ext.analysis.stats.power import (
    binomial_sd,
    design_effect,
    discordance_rate,
    paired_mde,
    preregistration_card,
    qri,
    usable_design_effect,
)
from lm_eval_ext.analysis.stats.rank_flips import (
    FACTORS,
    condition_orderings,
    rank_flip_intervals,
    rank_flip_table,
    ranking_summary,
    same_partition,
    variance_shares,
)
from lm_eval_ext.analysis.stats.subgroups import benjamini_hochberg, holm, subgroup_masks
from lm_eval_ext.cards import describe_difference, differing_axes, differing_factors


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


def _membership_names() -> dict[str, str]:
    """The frozen memberships' fingerprints -> their names (``12p5pct``, ``instrument``, ...)."""
    from lm_eval_ext.data.instrument import load_manifest

    return {rec["membership_sha256"]: name for name, rec in load_manifest()["memberships"].items()}


def energy_comparability(reference: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Why two runs' joules cannot be compared (None when they can).

    A ratio across energy sources (NVML board energy vs RAPL package energy) or across GPUs
    (different UUIDs: other silicon, other idle power) measures the hardware, not the change.
    """
    if reference.get("energy_source") != run.get("energy_source"):
        return (f"different energy sources ({reference.get('energy_source')} vs "
                f"{run.get('energy_source')})")
    if (reference.get("gpu_uuids") or "") != (run.get("gpu_uuids") or ""):
        return f"different GPUs ({reference.get('gpu_uuids')} vs {run.get('gpu_uuids')})"
    return None


def _run_table(reference: Run, runs: list[Run]) -> pd.DataFrame:
    table = pd.DataFrame([{**r.info, "is_reference": r is reference, "n_items": len(r.items)}
                          for r in [reference, *runs]]).drop(columns=["task_settings"])
    ref = table.iloc[0]
    notes = [energy_comparability(reference.info, r.info) for r in [reference, *runs]]
    table["energy_ratio_note"] = [n or "" for n in notes]
    for column, ratio in (("energy_joules", "energy_ratio"),
                          ("inference_seconds", "runtime_ratio")):
        values = pd.to_numeric(table[column], errors="coerce")
        table[ratio] = values / values.iloc[0] if pd.notna(ref[column]) and ref[column] else np.nan
    refused = np.array([n is not None for n in notes])
    if refused.any():
        warnings.warn("energy ratio not reported for " + "; ".join(
            f"{run_id}: {note}" for run_id, note in zip(table["run"], notes, strict=True) if note),
            DegenerateDataWarning, stacklevel=2)
        table.loc[refused, "energy_ratio"] = np.nan
    table["energy_saving_pct"] = 100 * (1 - table["energy_ratio"])
    table["runtime_saving_pct"] = 100 * (1 - table["runtime_ratio"])
    table["joules_per_item"] = pd.to_numeric(table["energy_joules"], errors="coerce") / table["n_items"]
    return table


def card_differences(reference: Run, runs: list[Run]) -> pd.DataFrame:
    """Per run and task: the card axes that differ from the reference's card.

    Tasks are matched by name, or by position for single-task runs (a subset task against the
    full instrument), so a comparison that changes two things at once shows both.
    """
    rows = []
    ref_cards = list(reference.cards.items())
    for run in runs:
        for position, (task, card) in enumerate(run.cards.items()):
            ref = reference.cards.get(task) or (ref_cards[position][1]
                                                 if position < len(ref_cards) else {})
            factors = differing_factors(ref, card)
            rows.append({"run": run.run_id, "task": task, "n_factors": len(factors),
                         "factors": ",".join(factors),
                         "axes": ",".join(differing_axes(ref, card)),
                         "differences": describe_difference(ref, card)})
    return pd.DataFrame(rows, columns=["run", "task", "n_factors", "factors", "axes",
                                       "differences"])


def _adjust(deltas: pd.DataFrame) -> pd.DataFrame:
    deltas["p_adjusted"] = np.nan
    deltas["p_adjusted_bh"] = np.nan
    for _, index in deltas.groupby(["run", "metric", "subgroup_type"]).groups.items():
        p = deltas.loc[index, "p_value"].to_numpy(float)
        deltas.loc[index, "p_adjusted"] = holm(p)
        deltas.loc[index, "p_adjusted_bh"] = benjamini_hochberg(p)
    return deltas


def _grid_cells(grid_runs: list[Run], metric) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """One row per run x task, and each row's per-unit correct counts (for resampling).

    The benchmark key includes the item set (a frozen membership's name, else the first 12
    characters of its fingerprint): runs over different item sets are different benchmarks
    here, so a rank is never compared across item sets; two runs in one cell are an error
    (see ``cell_matrix``).
    """
    rows, unit_sums = [], {}
    known = _membership_names()
    for run in grid_runs:
        for task, items in run.items.groupby("task"):
            setting = run.info["task_settings"][task]
            benchmark = task.split("_subset")[0].split("_instrument")[0]
            membership = setting.get("membership_sha256")
            label = known.get(membership) or (membership or "")[:12]
            row = {"benchmark": f"{benchmark}[{label}]" if membership else benchmark,
                   "model": run.info["model"], "precision": run.info["precision"],
                   "batch_size": str(run.info["batch_size"]), **setting,
                   "value": metric.compute(items), "run": run.run_id}
            unit_sums[len(rows)] = (items.assign(correct=items["correct"].astype(float))
                                    .groupby(items["unit_id"].astype(str))["correct"]
                                    .agg(correct="sum", n="size"))
            rows.append(row)
    cells = pd.DataFrame(rows)
    cells["config"] = ""
    for _, index in cells.groupby("benchmark").groups.items():
        group = cells.loc[index]
        # a factor that only relabels the model (precision variants as "models") is no config
        factors = [f for f in FACTORS if f != "model" and not (
            group[f].astype(str).nunique() > 1 and same_partition(group["model"], group[f]))]
        cells.loc[index, "config"] = group[factors].astype(str).apply(
            lambda row, fs=factors: "|".join(f"{f}={row[f]}" for f in fs), axis=1)
    return cells, unit_sums


def core_mask(cells: pd.DataFrame, core: dict[str, list[str]]) -> pd.Series:
    """Which grid cells lie in the core sub-envelope; an error for a factor or level no cell has."""
    inside = pd.Series(True, index=cells.index)
    for factor, levels in core.items():
        factors = [c for c in cells.columns if c not in {"value", "run", "config", "benchmark"}]
        if factor not in factors:
            hint = difflib.get_close_matches(factor, factors, n=1)
            raise AnalysisInputError(
                f"--core {factor}=...: the grid has no factor {factor!r} "
                + (f"(did you mean {hint[0]!r}?)" if hint else f"(it has {', '.join(factors)})"))
        present = sorted(set(cells[factor].astype(str)))
        missing = [level for level in levels if level not in present]
        if missing:
            raise AnalysisInputError(f"--core {factor}={','.join(levels)}: no grid run has {factor} "
                              f"{', '.join(missing)} (its runs have {', '.join(present)})")
        inside &= cells[factor].astype(str).isin(levels)
    return inside


def _grid_analysis(grid: Sequence[str | Path], core: dict[str, list[str]] | None,
                   n_resamples: int, rng, level: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Rank flips, rankings (full envelope, plus the core one), shares and orderings.

    The last two: variance shares over the grid factors, and each condition's ordering of
    the models against the consensus. The full envelope's rho_flip and mean tau carry
    natural-unit cluster-bootstrap intervals and each pair's ordering noise.
    """
    cells, unit_sums = _grid_cells(load_runs(grid, one_per_entry=False), ACCURACY)
    models = sorted(set(cells["model"].astype(str)))
    if len(models) < 2:
        raise AnalysisInputError(f"--grid: every run is of model {models[0]}, so there is no "
                                 "ordering of models to flip; give runs of two or more models")
    if core:
        cells = cells.assign(in_core=core_mask(cells, core))
    pair_ci, tau_ci = rank_flip_intervals(cells, unit_sums, n_resamples, rng, level)
    flips = rank_flip_table(cells).merge(pair_ci, on=["benchmark", "model_a", "model_b"],
                                         how="left").assign(envelope="full")
    rankings = ranking_summary(cells).merge(tau_ci, on="benchmark", how="left").assign(
        envelope="full")
    if core:
        inner = cells[cells["in_core"]]
        flips = pd.concat([flips, rank_flip_table(inner).assign(envelope="core")])
        rankings = pd.concat([rankings, ranking_summary(inner).assign(envelope="core")])
    return flips, rankings, variance_shares(cells), condition_orderings(cells)


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


def _check_judged_alike(specs: Sequence[Any], items: dict[str, pd.DataFrame]) -> None:
    """A judge metric needs judge scores in every run (a paired delta against nothing is not one)."""
    for spec in specs:
        column = spec.valid_column
        missing = [run for run, frame in items.items() if column and column not in frame]
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
        _grid_analysis(grid, core, n_resamples, np.random.default_rng(seed), level) if grid
        else (None, None, None, None))
    alignment = align(ref_run, other, intersection=intersection)
    ref_items = aligned_items(ref_run, alignment)
    run_items = {r.run_id: aligned_items(r, alignment) for r in other}
    specs = paired_metrics([ref_items, *run_items.values()])
    _check_judged_alike(specs, {ref_run.run_id: ref_items, **run_items})
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
            comparison_rows.append(_comparison(ref_items, items, run.run_id, design.codes))
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
    comparisons = _add_power(pd.DataFrame(comparison_rows), deltas, summary,
                             design.n_clusters, alignment.n, template_sd_pp)

    all_items = pd.concat([ref_items.assign(run=ref_run.run_id), *run_items.values()],
                          ignore_index=True)
    run_table = _run_table(ref_run, other)
    joules = run_table["energy_joules"]
    cards = {r.run_id: next(iter(r.cards.values()), {}) for r in [ref_run, *other]}
    claims = claim_table(specs, ref_items, run_items, deltas, design, _frozen_memberships(),
                         level, None if joules.isna().any() else float(joules.sum()),
                         reference_id=ref_run.run_id, cards=cards, mc_draws=mc_draws, rng=rng)
    clustering = clustering_sensitivity(specs, ref_items, run_items, deltas, cluster,
                                        n_resamples=n_resamples, rng=rng, level=level)
    return AnalysisResult(
        ref_run.run_id, [r.run_id for r in other], alignment.n, design.n_clusters,
        alignment.dropped, all_items, run_table, deltas, comparisons, summary,
        draws, frozen, flips, rankings, shares,
        {"n_resamples": n_resamples, "mc_draws": mc_draws, "seed": seed, "level": level,
         "intersection": intersection, "cluster": cluster},
        {r.run_id: r.cards for r in [ref_run, *other]}, card_differences(ref_run, other),
        claims, clustering, orderings)


def _comparison(ref_items: pd.DataFrame, items: pd.DataFrame, run_id: str,
                codes: np.ndarray) -> dict[str, Any]:
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


def _add_power(comparisons: pd.DataFrame, deltas: pd.DataFrame, membership: pd.DataFrame,
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
