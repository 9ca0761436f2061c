"""The analysis report as Markdown (``report.md``): conclusions, claims, cost and tables.

Also the pieces other reports reuse: :func:`markdown_table`, :func:`verdict_of` and the lines
of conclusions (:func:`conclusion_lines`, which ``report.html`` shows too).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def markdown_table(frame: pd.DataFrame, columns: list[str] | None = None, max_rows: int = 60) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    frame = frame[columns] if columns else frame
    if frame.empty:
        return "_none_\n"
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    body = "".join("| " + " | ".join(_fmt(v) for v in row) + " |\n"
                   for row in frame.head(max_rows).itertuples(index=False))
    more = f"\n_{len(frame) - max_rows} more rows in the CSV._\n" if len(frame) > max_rows else ""
    return head + body + more


def verdict_of(row: pd.Series, level: float = 0.95, cluster: str = "unit") -> str:
    """The verdict on one delta, from its interval and its primary (cluster) test together.

    "changed" needs both the interval to exclude 0 and p < 1 - level; "no change detected"
    needs neither; when they disagree (percentile bootstrap and permutation test are
    different approximations near the boundary) it says so. A NaN interval reads
    "not estimable (reason)"; ``cluster``: what the bootstrap resamples (``--cluster``).
    """
    from lm_eval_ext.analysis.claims import CHANGED, UNCHANGED, verdict

    claim = verdict(row["ci_low"], row["ci_high"], row["p_value"], level)
    if claim == "not estimable":
        if not (math.isfinite(row["reference"]) and math.isfinite(row["value"])):
            reason = "the metric is undefined on these items (empty denominator)"
        elif row["n_clusters"] < 2:
            reason = f"fewer than 2 {CLUSTER_NAMES.get(cluster, cluster).replace('(s)', 's')}"
        else:
            reason = "more than 10% of resamples undefined"
        return f"not estimable ({reason})"
    if claim == CHANGED:
        return f"changed (CI excludes 0, p < {1 - level:g})"
    if claim == UNCHANGED:
        return "no change detected (CI includes 0)"
    excludes_zero = row["ci_low"] > 0 or row["ci_high"] < 0
    return ("borderline (the CI and the cluster permutation test disagree: "
            + ("CI excludes 0 but p >= {:g})" if excludes_zero else "p < {:g} but CI includes 0)")
            .format(1 - level))


#: the report's note where runs parse generations (two accuracies in one report: docs/analysis.md)
TWO_ACCURACIES = ("Accuracy counts a parse failure as wrong (lm-eval's `acc`); the accuracy "
                  "factor of bias_s_amb is over ambiguous items with a parsed answer (the "
                  "upstream rule, the task's `acc_ambig`), so parse failures show in accuracy "
                  "and parse_failure_rate, not in the bias scores.")

#: fewer natural units than this: a delta's interval and p rest on too few clusters to trust
FEW_UNITS = 10


#: what the bootstrap resamples, as the report names it (``--cluster``)
CLUSTER_NAMES = {"unit": "natural unit(s)", "template": "template(s)"}


def small_sample_note(n_clusters: int, cluster: str = "unit") -> str:
    """A caution for a delta over fewer than :data:`FEW_UNITS` clusters (else empty)."""
    if n_clusters >= FEW_UNITS:
        return ""
    return (f" (caution: only {n_clusters} {CLUSTER_NAMES.get(cluster, cluster)}: the interval "
            "and p are rough; evaluate more items)")


def _undefined_note(share: float) -> str:
    """A flag when some bootstrap resamples left the delta undefined (dropped from the CI)."""
    if not share or not math.isfinite(share):
        return ""
    return (f" (interval from the defined resamples: {100 * share:.1f}% undefined)" if share <= 0.1
            else f" (no interval: {100 * share:.1f}% of resamples undefined)")


def conclusion_lines(deltas: pd.DataFrame, level: float, cluster: str = "unit") -> list[str]:
    """One line per run and metric over all items: values, delta, interval, p, verdict."""
    lines = []
    overall = deltas[deltas["subgroup_type"] == "all"]
    for _, row in overall.iterrows():
        verdict = verdict_of(row, level, cluster)
        lines.append(
            f"- **{row['run']}**, {row['metric']}: {row['value']:.4g} vs {row['reference']:.4g}, "
            f"delta {row['delta_pp']:+.2f} pp [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}] "
            f"({level:.0%} cluster bootstrap), p = {row['p_value']:.3g} ({row['test']}"
            + (f"; item-level McNemar p = {row['p_value_mcnemar']:.3g}"
               if math.isfinite(row["p_value_mcnemar"]) else "") + f"): {verdict}"
            + _undefined_note(row.get("undefined_resample_share", 0.0))
            + small_sample_note(int(row["n_clusters"]), cluster))
    return lines


def _claim_lines(claims: pd.DataFrame | None) -> list[str]:
    """Each claim with its stability over memberships, Monte Carlo draws and protocols."""
    if claims is None or claims.empty:
        return []
    lines = ["\n## Claims and their stability\n",
             "Where each claim holds (same verdict; same sign if changed): the frozen subset "
             "memberships, Monte Carlo natural-unit draws at each subset size (linearised Wald "
             "verdicts), and the same change made at another batch size or precision among the "
             "runs given.\n"]
    for _, row in claims.iterrows():
        checks = [f"{row['memberships_holding']} of {row['memberships_checked']} frozen "
                  f"memberships" if row["memberships_checked"] else
                  "no frozen membership checked (none lies wholly inside the paired items)"]
        if row["mc_draws_checked"]:
            sizes = ", ".join(f"{part.split(':')[0]} {float(part.split(':')[1]):.0%}"
                              for part in row["mc_stability_by_size"].split(";"))
            checks.append(f"{row['mc_stability']:.0%} of {row['mc_draws_checked']:,} draws "
                          f"({sizes})")
        if row["protocol_checked"]:
            checks.append(f"{row['protocol_holding']} of {row['protocol_checked']} other batch "
                          f"sizes / precisions ({row['protocol_pairs']})")
        lines.append(f"- {row['sentence']}; holds in " + "; ".join(checks) + "\n")
    per_claim = claims["joules_per_settled_claim"].iloc[0]
    lines.append("\nEnergy per settled (changed) claim: "
                 + (f"{per_claim:,.0f} J (all runs' joules / claims)\n" if per_claim == per_claim
                    else "n/a (no claim changed, or joules not measured)\n"))
    return lines


def _clustering_lines(result) -> list[str]:
    """Whether a verdict rests on the resampling unit (natural unit vs BBQ template)."""
    table = result.clustering
    if table is None:
        return []
    moved = table[table["depends_on_clustering"]]
    head = (f"\n## Clustering unit\n\nIntervals and tests resample {result.settings['cluster']}s "
            f"(`--cluster`); the natural unit and the template (category x question_index, "
            f"{int(table['n_clusters_template'].iloc[0])} templates for "
            f"{int(table['n_clusters_unit'].iloc[0])} units) give ")
    apart = table[~table["comparable"]]
    untold = ("" if apart.empty else
              f" ({len(apart)} run x metric pair(s) have no verdict under one of them, so no "
              "comparison: " + ", ".join(f"{r.run} {r.metric}" for r in apart.itertuples()) + ")")
    if moved.empty:
        return [head + f"the same verdict for every run and metric where both give one{untold} "
                "(`clustering.csv`).\n"]
    return [head + f"different verdicts for{untold}:\n",
            *[f"- {r.run} {r.metric}: {r.verdict_unit} (unit) vs {r.verdict_template} "
              f"(template)\n" for r in moved.itertuples()]]


def _difference_lines(differences: pd.DataFrame | None) -> list[str]:
    """The disclosure-card axes each run changes relative to the reference."""
    if differences is None or differences.empty:
        return []
    lines = ["\n## What each run changes (disclosure cards)\n"]
    for _, row in differences.iterrows():
        warn = (f" **(changes {row['n_factors']} factors at once ({row['factors']}): the delta "
                "cannot be attributed to one)**" if row["n_factors"] > 1 else
                " **(a repeat of the reference: it changes no setting, so its deltas and ratios "
                "measure run-to-run variation, not a protocol change)**"
                if row["n_factors"] == 0 else "")
        lines.append(f"- {row['run']} ({row['task']}): {row['differences']}{warn}\n")
    return lines


def _interval(row: pd.Series, ratio: str) -> str:
    """``0.52 [0.50, 0.54]``, or the bare ratio where it has no interval, or n/a."""
    value, low, high = row.get(ratio), row.get(f"{ratio}_ci_low"), row.get(f"{ratio}_ci_high")
    if value is None or pd.isna(value):
        return "n/a"
    if row.get("is_reference"):
        return "reference"
    if low is None or pd.isna(low):
        return f"{value:.3g} (no interval)"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]"


def _cost_lines(runs: pd.DataFrame) -> list[str]:
    """The cost table, each ratio with its 95% interval and the runs' execution modes."""
    table = runs.assign(**{
        "energy ratio (raw)": [_interval(r, "energy_ratio") for _, r in runs.iterrows()],
        "energy ratio (idle-corrected)": [_interval(r, "energy_ratio_idle_corrected")
                                          for _, r in runs.iterrows()],
        "runtime ratio": [_interval(r, "runtime_ratio") for _, r in runs.iterrows()]})
    mixed = runs[runs["modes_differ"].astype(bool)] if "modes_differ" in runs else runs[:0]
    lines = [markdown_table(table, ["run", "precision", "batch_size", "execution_mode",
                                    "inference_seconds", "energy_joules", "idle_share",
                                    "energy ratio (raw)", "energy ratio (idle-corrected)",
                                    "runtime ratio", "energy_flags", "energy_ratio_note",
                                    "ratio_note"]),
             "\nRatios are run / reference with 95% intervals from each run's standard errors "
             "(within-run and run-to-run; docs/energy.md: what they cover, measured against "
             "repeated runs); raw is the board's energy in the inference windows, idle-corrected less "
             "the idle baseline sampled before and after the work.\n"]
    if not mixed.empty:
        lines.append("**Execution modes differ** for " + ", ".join(
            f"{r['run']} ({r['execution_mode']})" for _, r in mixed.iterrows())
                     + f" against the reference ({runs.iloc[0]['execution_mode']}): those "
                     "ratios measure the execution mode as well as the change. Campaigns: "
                     "`--execution lm-eval` runs every cell in lm-eval's own mode.\n")
    return lines


def report_markdown(result, figure_paths: list[Path], out: Path) -> str:
    """``report.md`` of an :class:`AnalysisResult`, its figures linked relative to ``out``."""
    s = result.settings
    parts = [
        "# Did the conclusion change?\n",
        f"Reference: **{result.reference_id}**. Runs: {', '.join(result.run_ids)}.\n",
        f"Paired items: {result.n_items} in {result.n_clusters} "
        + ("natural units" if s["cluster"] == "unit" else "templates")
        + (f" (the items all runs share; left out per run: {result.dropped})" if s["intersection"] else "")
        + f". Cluster bootstrap: {s['n_resamples']} resamples, seed {s['seed']}; "
        f"Monte Carlo: {s['mc_draws']} draws per size.\n",
        "## Conclusions (all items)\n", *[line + "\n" for line in
                                          conclusion_lines(result.deltas, s["level"], s["cluster"])],
        *([TWO_ACCURACIES + "\n"] if (result.deltas["metric"] == "parse_failure_rate").any()
          else []),
        *_clustering_lines(result),
        *_claim_lines(result.claims),
        *_difference_lines(result.card_differences),
        "\n## Cost\n", *_cost_lines(result.runs),
        "\n## Paired comparisons\n", markdown_table(result.comparisons),
        "\n## Subgroup deltas (Holm-adjusted within run x metric x subgroup type)\n",
        markdown_table(result.deltas[result.deltas["subgroup_type"] != "all"],
                       ["run", "metric", "subgroup_type", "subgroup", "n", "delta_pp", "ci_low",
                        "ci_high", "p_value", "p_adjusted"]),
        "\n## Subset-membership sensitivity\n", markdown_table(result.membership_summary),
        "\n### Frozen memberships\n", markdown_table(result.membership_frozen),
    ]
    if result.rank_flips is not None:
        parts += ["\n## Rank flips over the grid\n", markdown_table(result.rank_flips),
                  "\n### Rankings\n", markdown_table(result.rankings),
                  "\n### Variance shares (Type II ANOVA)\n", markdown_table(result.variance_shares)]
    parts.append("\n## Figures\n")
    parts += [f"![{p.stem}]({p.relative_to(out)})\n" for p in figure_paths]
    return "\n".join(parts)
