"""Rank instability over a grid of runs (models x configurations), after SafetyRepro.

For each benchmark and model pair (A, B) over the configuration cells where both ran:
``N+`` cells where A scores higher, ``N-`` where B does, ``|C|`` cells, and
``rho_flip = min(N+, N-) / |C|`` (0: one model always ahead; 0.5: a coin flip). Also the mean
Kendall tau between the model rankings induced by every pair of cells, the distinct orderings
that some cell reaches, and Type II ANOVA variance shares of the metric over the grid factors.
"""

from __future__ import annotations

import warnings
from collections import Counter
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.stats.bootstrap import as_rng, bootstrap_counts
from lm_eval_ext.analysis.stats.subgroups import holm

FACTORS = ("model", "precision", "batch_size", "template_tier", "shots", "decoding",
           "scoring_path")


def cell_matrix(cells: pd.DataFrame) -> pd.DataFrame:
    """One benchmark's cells as config x model values; two runs in one cell are an error."""
    counts = cells.groupby(["config", "model"]).size()
    if (counts > 1).any():
        config, model = counts[counts > 1].index[0]
        runs = cells[(cells["config"] == config) & (cells["model"] == model)]
        listed = ", ".join(runs["run"]) if "run" in runs else f"{len(runs)} runs"
        raise AnalysisInputError(
            f"grid cell {model} / {config} holds several runs ({listed}); a cell is one run, "
            "never a mean: pass one run per model x configuration x item set")
    return cells.pivot(index="config", columns="model", values="value")


def rank_flip_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows: benchmark, model_a, model_b, n_plus, n_minus, n_ties, n_cells, rho_flip."""
    rows = []
    for benchmark, group in cells.groupby("benchmark"):
        wide = cell_matrix(group)
        for a, b in combinations(sorted(wide.columns), 2):
            both = wide[[a, b]].dropna()
            diff = both[a] - both[b]
            n_plus, n_minus = int((diff > 0).sum()), int((diff < 0).sum())
            n_cells = len(both)
            rows.append({"benchmark": benchmark, "model_a": a, "model_b": b, "n_plus": n_plus,
                         "n_minus": n_minus, "n_ties": n_cells - n_plus - n_minus,
                         "n_cells": n_cells,
                         "rho_flip": min(n_plus, n_minus) / n_cells if n_cells else np.nan})
    return pd.DataFrame(rows, columns=["benchmark", "model_a", "model_b", "n_plus", "n_minus",
                                       "n_ties", "n_cells", "rho_flip"])


def _ordering(values: pd.Series) -> str:
    """``A > B = C``: models by value, ties joined by ``=`` (in name order)."""
    ranked = values.sort_index().sort_values(ascending=False, kind="stable")
    text = str(ranked.index[0])
    for (_, high), (name, low) in zip(ranked.iloc[:-1].items(), ranked.iloc[1:].items(),
                                      strict=True):
        text += f" {'=' if high == low else '>'} {name}"
    return text


def ranking_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark: mean Kendall tau over cell pairs, and the reachable model orderings."""
    rows = []
    for benchmark, group in cells.groupby("benchmark"):
        wide = cell_matrix(group)
        taus = []
        for c1, c2 in combinations(wide.index, 2):
            both = wide.loc[[c1, c2]].dropna(axis=1)
            if both.shape[1] >= 2:
                tau = stats.kendalltau(both.loc[c1], both.loc[c2]).statistic
                if np.isfinite(tau):
                    taus.append(tau)
        complete = wide.dropna(axis=0)
        orderings = Counter(_ordering(row) for _, row in complete.iterrows())
        rows.append({"benchmark": benchmark, "n_models": wide.shape[1], "n_cells": wide.shape[0],
                     "mean_kendall_tau": float(np.mean(taus)) if taus else np.nan,
                     "n_cell_pairs": len(taus), "n_orderings": len(orderings),
                     "orderings": "; ".join(f"{o} ({n})" for o, n in orderings.most_common())})
    return pd.DataFrame(rows)


def condition_orderings(cells: pd.DataFrame) -> pd.DataFrame:
    """Each condition's ordering of the models against the consensus ordering.

    The consensus ranks the models by their mean value over the conditions where every model
    ran. Per benchmark, condition (config) and model: the value, the rank (1 = highest, ties
    share the lower rank), Kendall's tau between the condition's values and the consensus means
    (NaN with fewer than two models or a constant side), and the models this one is flipped
    with (ordered the other way round than in the consensus, ties not counted).
    """
    rows = []
    for benchmark, group in cells.groupby("benchmark"):
        wide = cell_matrix(group)
        complete = wide.dropna(axis=0)
        consensus = (complete if len(complete) else wide).mean(axis=0)
        for config, values in wide.iterrows():
            values = values.dropna()
            ranks = values.rank(ascending=False, method="min")
            tau = np.nan
            if len(values) >= 2 and values.nunique() > 1 and consensus[values.index].nunique() > 1:
                tau = float(stats.kendalltau(values, consensus[values.index]).statistic)
            for model, value in values.items():
                flipped = sorted(str(other) for other in values.index if other != model
                                 and (value - values[other])
                                 * (consensus[model] - consensus[other]) < 0)
                rows.append({"benchmark": benchmark, "config": config, "model": model,
                             "value": float(value), "rank": int(ranks[model]),
                             "consensus_value": float(consensus[model]),
                             "kendall_tau_vs_consensus": tau,
                             "flipped_with": ", ".join(flipped)})
    return pd.DataFrame(rows, columns=["benchmark", "config", "model", "value", "rank",
                                       "consensus_value", "kendall_tau_vs_consensus",
                                       "flipped_with"])


def same_partition(a: pd.Series, b: pd.Series) -> bool:
    """Whether two factors split the cells identically (levels in one-to-one correspondence)."""
    a, b = a.astype(str), b.astype(str)
    return bool((a.groupby(b).nunique() == 1).all() and (b.groupby(a).nunique() == 1).all())


def variance_shares(cells: pd.DataFrame, factors: tuple[str, ...] = FACTORS,
                    interactions: bool = True) -> pd.DataFrame:
    """Type II ANOVA sums of squares of ``value`` and each term's share of the total.

    Only factors with more than one level in a benchmark enter its model; two-way
    interactions of ``model`` with each other factor are added when ``interactions`` and the
    grid has replicates to separate them from the residual (else a ``note`` says so).
    """
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    rows = []
    for benchmark, group in cells.groupby("benchmark"):
        used = [f for f in factors if f in group and group[f].astype(str).nunique() > 1]
        aliased = [f for f in used if f != "model" and "model" in used
                   and same_partition(group["model"], group[f])]
        used = [f for f in used if f not in aliased]  # e.g. precision variants as "models"
        if not used:
            continue
        data = group.assign(**{f: group[f].astype(str) for f in used})
        main = [f"C({f})" for f in used]
        extra = [f"C(model):C({f})" for f in used if f != "model"] \
            if interactions and "model" in used else []
        note = (f"{', '.join(aliased)} identical to model (not separable)" if aliased else "")
        fit = smf.ols(f"value ~ {' + '.join(main + extra)}", data=data).fit()
        if extra and fit.df_resid < 1:  # one run per cell: interactions are the residual
            fit = smf.ols(f"value ~ {' + '.join(main)}", data=data).fit()
            note = "; ".join(filter(None, [
                note, "interactions not separable from the residual (one run per cell)"]))
        if fit.df_resid < 1:
            rows.append({"benchmark": benchmark, "term": "(saturated)", "sum_sq": np.nan,
                         "df": 0.0, "share": np.nan,
                         "note": "no residual degrees of freedom: add runs"})
            continue
        table = anova_lm(fit, typ=2)
        total = float(((data["value"] - data["value"].mean()) ** 2).sum())
        for term, row in table.iterrows():
            rows.append({"benchmark": benchmark, "term": term.replace("C(", "").replace(")", ""),
                         "sum_sq": float(row["sum_sq"]), "df": float(row["df"]),
                         "share": float(row["sum_sq"]) / total if total else np.nan,
                         "note": note})
    return pd.DataFrame(rows)


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between the last axes of ``x`` and ``y`` (batched; NaN where undefined)."""
    i, j = np.triu_indices(x.shape[-1], k=1)
    sx, sy = np.sign(x[..., i] - x[..., j]), np.sign(y[..., i] - y[..., j])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sx * sy).sum(-1) / np.sqrt((sx ** 2).sum(-1) * (sy ** 2).sum(-1))


def rank_flip_intervals(cells: pd.DataFrame, unit_sums: dict[int, pd.DataFrame],
                        n_resamples: int, rng, level: float = 0.95
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Natural-unit cluster-bootstrap intervals of rho_flip and mean Kendall tau; flip tests.

    ``unit_sums`` maps a cell's index to its per-unit ``correct`` and ``n`` (accuracy). Each
    resample draws the benchmark's natural units with replacement, the same draw for every cell
    (all cells of a benchmark hold the same items). ``ordering_noise`` of a model pair is the
    share of (resample, condition) in which the pair's order differs from the condition's
    observed order: how fragile the observed orders are (a descriptive figure, not a test: a
    truly tied pair shows about 25-50%). ``flip_p`` tests whether the pair's order truly
    reverses between conditions (:func:`flip_pvalue`); ``flip_p_holm`` is Holm-adjusted over
    every pair and benchmark, and ``beyond_noise`` is ``flip_p_holm <= 1 - level``.
    ``gap_varies_p`` (and its Holm ``gap_varies_p_holm``) tests the weaker "the gap between the
    two models differs between conditions" (:func:`gap_varies_pvalue`, from the units'
    influences rather than the resamples).
    """
    rng = as_rng(rng)
    tail = (1 - level) / 2
    pair_rows, tau_rows = [], []
    for benchmark, group in cells.groupby("benchmark"):
        units = sorted(set().union(*(unit_sums[i].index for i in group.index)))
        correct = np.array([unit_sums[i]["correct"].reindex(units, fill_value=0).to_numpy()
                            for i in group.index], float)
        counts = np.array([unit_sums[i]["n"].reindex(units, fill_value=0).to_numpy()
                           for i in group.index], float)
        weights = bootstrap_counts(len(units), n_resamples, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = (weights @ correct.T) / (weights @ counts.T)  # (B, cells)
        configs = list(dict.fromkeys(group["config"]))
        models = sorted(set(group["model"]))
        values = np.full((n_resamples, len(configs), len(models)), np.nan)
        observed = np.full((len(configs), len(models)), np.nan)
        column_of = np.zeros((len(configs), len(models)), int)
        for column, (_, cell) in enumerate(group.iterrows()):
            c, m = configs.index(cell["config"]), models.index(cell["model"])
            values[:, c, m], observed[c, m] = draws[:, column], cell["value"]
            column_of[c, m] = column
        for a, b in combinations(range(len(models)), 2):
            both = ~np.isnan(observed[:, a]) & ~np.isnan(observed[:, b])
            diff = values[:, both, a] - values[:, both, b]
            n_plus, n_minus = (diff > 0).sum(1), (diff < 0).sum(1)
            rho = np.minimum(n_plus, n_minus) / max(int(both.sum()), 1)
            seen = np.sign(observed[both, a] - observed[both, b])
            flipped = (np.sign(diff) != seen) & (seen != 0)
            noise = float(flipped.mean()) if flipped.size else np.nan
            low, high = np.quantile(rho, [tail, 1 - tail]) if both.any() else (np.nan, np.nan)
            gap = observed[both, a] - observed[both, b]
            gap_influence = _gap_influence(correct, counts, column_of[both, a],
                                           column_of[both, b])
            pair_rows.append({"benchmark": benchmark, "model_a": models[a], "model_b": models[b],
                              "rho_flip_ci_low": float(low), "rho_flip_ci_high": float(high),
                              "ordering_noise": noise, "flip_p": flip_pvalue(gap, diff),
                              "gap_varies_p": gap_varies_pvalue(gap, gap_influence)})
        complete = ~np.isnan(observed).any(axis=1)
        pairs = list(combinations(np.flatnonzero(complete), 2))
        if pairs and len(models) >= 2:
            taus = np.stack([kendall_tau_b(values[:, c1], values[:, c2]) for c1, c2 in pairs], 1)
            with warnings.catch_warnings():  # a draw that ties every pair has no tau
                warnings.simplefilter("ignore", RuntimeWarning)
                mean_tau = np.nanmean(taus, axis=1)
            low, high = np.nanquantile(mean_tau, [tail, 1 - tail])
        else:
            low = high = np.nan
        tau_rows.append({"benchmark": benchmark, "mean_kendall_tau_ci_low": float(low),
                         "mean_kendall_tau_ci_high": float(high)})
    pairs = pd.DataFrame(pair_rows, columns=["benchmark", "model_a", "model_b", "rho_flip_ci_low",
                                             "rho_flip_ci_high", "ordering_noise", "flip_p",
                                             "gap_varies_p"])
    for column in ("flip_p", "gap_varies_p"):
        pairs[f"{column}_holm"] = holm(pairs[column].to_numpy(float)) if len(pairs) else []
    pairs["beyond_noise"] = pairs["flip_p_holm"] <= 1 - level
    return pairs, pd.DataFrame(tau_rows)


def _studentised(values: np.ndarray, resampled: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """``values / se`` and the centred resamples ``(resampled - values) / se`` per column.

    Only the columns with a positive SE count; None with fewer than two of them.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(resampled, axis=0, ddof=1)
        usable = np.isfinite(se) & (se > 0) & np.isfinite(values)
        if usable.sum() < 2 or resampled.shape[0] == 0:
            return None
        centred = (resampled[:, usable] - values[usable]) / se[usable]
    return values[usable] / se[usable], np.where(np.isfinite(centred), centred, 0.0)


def cell_influence(correct: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each unit's linearised influence on each cell's accuracy (cells x units).

    A cell's accuracy is ``sum_u correct / sum_u n``; unit u's influence ``(correct_u - acc *
    n_u) / mean_u(n)`` averages to 0 over the units, and the influences' covariance over the
    units, divided by their number, is the accuracies' delta-method (cluster-robust) covariance,
    which the natural-unit bootstrap estimates.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = correct.sum(axis=1) / counts.sum(axis=1)
        return (correct - accuracy[:, None] * counts) / counts.mean(axis=1)[:, None]


def _gap_influence(correct: np.ndarray, counts: np.ndarray, cells_a: np.ndarray,
                   cells_b: np.ndarray) -> np.ndarray:
    """(units, conditions): each unit's influence on the gaps a - b.

    Over the units that hold items in these cells: a unit no run of the pair scored is no
    observation of the pair.
    """
    rows = np.r_[cells_a, cells_b]
    held = counts[rows].sum(axis=0) > 0
    influence = cell_influence(correct[rows][:, held], counts[rows][:, held])
    return (influence[:len(cells_a)] - influence[len(cells_a):]).T


def gap_varies_pvalue(gap: np.ndarray, influence: np.ndarray) -> float:
    """The p-value of "the pair's gap differs between conditions" (condition x model interaction).

    ``gap[c]`` is model a minus model b in condition c, ``influence[u, c]`` unit u's influence on
    it (:func:`cell_influence` of a minus b's), over the units holding items. Hotelling's
    one-sample T^2 of the deviations ``e = gap - mean(gap)``: ``T^2 = n e' S^+ e`` with ``S``
    the covariance of the units' deviation influences, ``k`` its rank (conditions whose gaps
    move together in every unit, as identical outputs do, add nothing) and ``T^2 (n - k) / (k
    (n - 1))`` judged by F(k, n - k), exact for normal unit means. The p is 1 with fewer than two
    conditions or no spread. A gap that varies is not yet a flip (+10 and +4 points vary
    without reversing the order): see :func:`flip_pvalue`.
    """
    influence = influence[np.isfinite(influence).all(axis=1)]
    units = influence.shape[0]
    if len(gap) < 2 or units < 2 or not np.isfinite(gap).all():
        return 1.0
    spread, axes = np.linalg.eigh(np.cov(influence - influence.mean(axis=1, keepdims=True),
                                         rowvar=False))
    kept = spread > 1e-10 * max(spread.max(), 0.0)
    k = int(kept.sum())
    if k == 0 or units <= k:
        return 1.0
    projected = axes[:, kept].T @ (gap - gap.mean())
    t2 = units * float(np.sum(projected ** 2 / spread[kept]))
    return float(stats.f.sf(t2 * (units - k) / (k * (units - 1)), k, units - k))


def flip_pvalue(gap: np.ndarray, resampled_gap: np.ndarray) -> float:
    """The p-value of "the pair's order truly reverses somewhere", from its gaps per condition.

    ``gap[c]`` is model a minus model b in condition ``c``; ``resampled_gap[r, c]`` the same
    under bootstrap resample ``r`` (one draw of units for every condition). The null is that
    the true gaps share a sign (all >= 0, or all <= 0: no true flip). With ``t_c = gap_c /
    se_c`` and the centred resamples ``t*_rc = (resampled_gap_rc - gap_c) / se_c``, the evidence
    against "all <= 0" is ``max_c t_c`` judged by the resampled ``max_c t*_rc`` (a simultaneous,
    one-sided bootstrap-t over the conditions, which keeps their correlation), and against "all
    >= 0" likewise ``max_c -t_c``; a flip needs both, so the p is the larger of the two
    (intersection-union). With fewer than two conditions, or no spread, the p is 1.
    """
    both = _studentised(gap, resampled_gap)
    if both is None:
        return 1.0
    t, centred = both
    above = (centred.max(axis=1) >= t.max()).sum()
    below = ((-centred).max(axis=1) >= (-t).max()).sum()
    count = max(above, below)
    return float((count + 1) / (centred.shape[0] + 1))
