"""Figures of the analysis report. They only read the result tables; no statistics here.

Every figure uses matplotlib's constrained layout, puts run names in a legend or a caption
rather than beside points (long names would collide), and sizes itself from what it shows.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator  # noqa: E402

#: metrics drawn against cost, in panel order
QUALITY_METRICS = ("accuracy", "bias_s_dis", "bias_s_amb", "parse_failure_rate")
MARKERS = "osD^vP<>Xh"
SIGNIFICANT = 0.05  # Holm-adjusted p below which a heatmap cell is marked


def save(fig: Figure | None, path: Path) -> Path | None:
    """Write a figure (None: nothing to draw) as PNG and close it."""
    if fig is None:
        return None
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _log_ticks(ax, values: np.ndarray) -> None:
    """Three labelled ticks over the data (log axes label only these: none can collide)."""
    low, high = float(np.min(values)), float(np.max(values))
    middle = float(np.sqrt(low * high))
    ticks = [middle] if high < 1.5 * low else [low, high] if high < 6 * low else [low, middle, high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticklabels([f"{t:.3g}" for t in ticks])
    ax.set_xlim(low / 1.6, high * 1.6)


def quality_vs_cost(runs: pd.DataFrame, overall: pd.DataFrame) -> Figure | None:
    """Each metric of every run, the reference included, against joules per item (log axis).

    Error bars are the 95% cluster-bootstrap intervals of each run's own value (the
    reference's from its own resamples). Without measured energy the x axis is inference
    seconds per item, and the figure's title says so. Runs are told apart by marker and named
    in one legend below the panels.
    """
    items = pd.to_numeric(runs["n_items"], errors="coerce").replace(0, np.nan)
    energy = pd.to_numeric(runs["energy_joules"], errors="coerce") / items
    seconds = pd.to_numeric(runs["inference_seconds"], errors="coerce") / items
    if (energy > 0).all():
        cost, unit = energy, "joules per item"
    elif (seconds > 0).all():
        cost, unit = seconds, "inference seconds per item (energy not measured)"
    else:
        return None
    metrics = [m for m in QUALITY_METRICS if m in set(overall["metric"])]
    if not metrics:
        return None
    points = _quality_points(runs, overall, metrics)
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.3 * len(metrics), 3.6),
                             squeeze=False, layout="constrained")
    for ax, metric in zip(axes[0], metrics, strict=True):
        for index, run in runs.reset_index(drop=True).iterrows():
            value, low, high = points[metric].get(run["run"], (np.nan,) * 3)
            if not np.isfinite(value):
                continue
            reference = bool(run["is_reference"])
            ax.errorbar(cost.iloc[index], value,
                        yerr=[[max(value - low, 0)], [max(high - value, 0)]]
                        if np.isfinite(low) and np.isfinite(high) else None,
                        fmt="*" if reference else MARKERS[index % len(MARKERS)],
                        markersize=11 if reference else 6, capsize=2, color=f"C{index % 10}",
                        label=f"{run['run']} (reference)" if reference else run["run"])
        ax.set_xscale("log")
        _log_ticks(ax, cost[cost > 0].to_numpy())
        ax.set_xlabel(unit.split(" (")[0])
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)),
               fontsize=8, frameon=False)
    fig.suptitle(f"Quality vs cost ({unit}; bars: 95% cluster bootstrap)", fontsize=10)
    return fig


def _quality_points(runs: pd.DataFrame, overall: pd.DataFrame, metrics: list[str]
                    ) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Metric -> run -> (value, interval low, interval high); the reference from any row."""
    reference = runs.loc[runs["is_reference"].astype(bool), "run"]
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for metric in metrics:
        rows = overall[overall["metric"] == metric]
        got = {r["run"]: (r["value"], r.get("value_ci_low", np.nan),
                          r.get("value_ci_high", np.nan)) for _, r in rows.iterrows()}
        if len(rows) and len(reference):
            first = rows.iloc[0]
            got[reference.iloc[0]] = (first["reference"], first.get("reference_ci_low", np.nan),
                                      first.get("reference_ci_high", np.nan))
        out[metric] = got
    return out


def subset_size(summary: pd.DataFrame, draws: pd.DataFrame, frozen: pd.DataFrame, *,
                as_delta_pp: bool = False) -> Figure | None:
    """Metric against subset size, each size naming its natural units.

    Monte Carlo spread (boxes), frozen memberships (dots) and the full instrument's value (a
    labelled line).

    ``as_delta_pp``: the y axis is the deviation from the full instrument, in points.
    """
    metrics = list(summary["metric"].unique()) if len(summary) else []
    if not metrics:
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8),
                             squeeze=False, layout="constrained")
    for ax, metric in zip(axes[0], metrics, strict=True):
        s = summary[summary["metric"] == metric].sort_values("size_units")
        full = float(s["full_value"].iloc[0])
        shift, scale = (full, 100.0) if as_delta_pp else (0.0, 1.0)
        d = draws[draws["metric"] == metric]
        groups = [(d[d["size_units"] == u]["value"].dropna().to_numpy() - shift) * scale
                  for u in s["size_units"]]
        positions = s["size_items"].to_numpy(float)
        gaps = np.diff(np.unique(positions))  # sizes of one item count (a cut) share a box
        width = 0.35 * gaps.min() if gaps.size else 1.0
        ax.boxplot(groups, positions=positions, widths=width, showfliers=False,
                   manage_ticks=False)
        f = frozen[frozen["metric"] == metric] if len(frozen) else frozen
        if len(f):
            items_of = dict(zip(s["size_units"], s["size_items"], strict=True))
            ax.scatter([items_of.get(u, np.nan) for u in f["size_units"]],
                       (f["value"] - shift) * scale, color="C3", zorder=3, s=18,
                       label="frozen memberships")
        ax.axhline((full - shift) * scale, color="grey", linestyle="--", linewidth=1,
                   label=f"full instrument ({full:.3g})")
        ax.set_xticks(positions, [f"{int(i)}\n({int(u)} u)" for i, u
                                  in zip(s["size_items"], s["size_units"], strict=True)],
                      fontsize=7)
        ax.set_xlim(positions.min() - width, positions.max() + width)
        ax.set_xlabel("subset size: items (natural units)")
        ax.set_ylabel(f"{metric} - full (pp)" if as_delta_pp else metric)
        ax.set_title(f"{metric} by subset size", fontsize=10)
        ax.legend(fontsize=7, loc="best")
    return fig


def delta_heatmap(deltas: pd.DataFrame, subgroup_type: str) -> Figure | None:
    """Runs x subgroups deltas (points) with their values, one panel per metric.

    One symmetric colour scale per metric, shared by all runs; a cell whose Holm-adjusted p is
    below 0.05 is outlined and starred. With one subgroup the panel is a small table instead.
    """
    data = deltas[deltas["subgroup_type"] == subgroup_type]
    defined = data.groupby("metric", sort=False)["delta_pp"].apply(lambda d: d.notna().any())
    metrics = [metric for metric, any_value in defined.items() if any_value]  # no empty panel
    if not metrics:
        return None
    data = data[data["metric"].isin(metrics)]
    runs, columns = data["run"].nunique(), data["subgroup"].nunique()
    if columns == 1:
        return _delta_table(data, metrics, subgroup_type)
    fig, axes = plt.subplots(len(metrics), 1, squeeze=False, layout="constrained",
                             figsize=(max(5.0, 0.62 * columns + 2.8),
                                      len(metrics) * (0.34 * runs + 1.9)))
    for ax, metric in zip(axes[:, 0], metrics, strict=True):
        rows = data[data["metric"] == metric]
        wide = rows.pivot_table(index="run", columns="subgroup", values="delta_pp")
        marked = rows.pivot_table(index="run", columns="subgroup", values="p_adjusted")
        marked = marked.reindex(index=wide.index, columns=wide.columns) < SIGNIFICANT
        values = wide.to_numpy(float)
        limit = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
        limit = max(limit, 1e-9)
        image = ax.imshow(values, cmap="RdBu_r", aspect="auto",
                          norm=TwoSlopeNorm(vcenter=0, vmin=-limit, vmax=limit))
        for (i, j), value in np.ndenumerate(values):
            if not np.isfinite(value):
                continue
            star = marked.iat[i, j]
            ax.text(j, i, f"{value:+.1f}{'*' if star else ''}", ha="center", va="center",
                    fontsize=6.5, fontweight="bold" if star else "normal",
                    color="white" if abs(value) > 0.6 * limit else "black")
            if star:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, linewidth=1.2,
                                           edgecolor="black"))
        ax.set_xticks(range(wide.shape[1]), wide.columns, rotation=90, fontsize=7)
        ax.set_yticks(range(wide.shape[0]), list(wide.index), fontsize=7)
        fig.colorbar(image, ax=ax, label="delta (pp)", shrink=0.9)
        ax.set_title(f"{metric}: delta vs reference by {subgroup_type} (* Holm p < 0.05)",
                     fontsize=9)
    return fig


def _delta_table(data: pd.DataFrame, metrics: list[str], subgroup_type: str) -> Figure:
    """A one-subgroup 'heatmap' as a small table of deltas, intervals and adjusted p."""
    rows = data[data["metric"].isin(metrics)].sort_values(["metric", "run"])
    cells = [[r["metric"], r["run"], f"{r['delta_pp']:+.2f}",
              f"[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]", f"{r['p_adjusted']:.3g}"]
             for _, r in rows.iterrows()]
    fig, ax = plt.subplots(figsize=(6.4, 0.28 * len(cells) + 0.9), layout="constrained")
    ax.axis("off")
    table = ax.table(cellText=cells, colLabels=["metric", "run", "delta (pp)", "95% CI",
                                                "Holm p"], loc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.auto_set_column_width(list(range(5)))
    ax.set_title(f"delta vs reference, {subgroup_type} {rows['subgroup'].iloc[0]}", fontsize=9)
    return fig


def rank_flips(orderings: pd.DataFrame | None) -> Figure | None:
    """Bump chart per benchmark: each condition's model ranks.

    Under each condition its Kendall tau against the consensus ordering; a red ring on models
    ordered the other way round than in the consensus. Conditions are numbered; the caption
    names them.
    """
    if orderings is None or orderings.empty:
        return None
    benchmarks = list(orderings["benchmark"].unique())
    configs = list(dict.fromkeys(orderings["config"]))
    number = {config: f"C{i + 1}" for i, config in enumerate(configs)}
    names, fixed = _condition_names(configs)
    n_models = orderings["model"].nunique()
    columns = min(3, len(benchmarks))
    rows = -(-len(benchmarks) // columns)
    fig, axes = plt.subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=(max(4.5, 0.9 * len(configs) + 2.5) * columns + 2,
                                      (0.45 * n_models + 2.2) * rows + 0.5
                                      + 0.16 * (len(configs) + 1)))
    for ax in axes.flat[len(benchmarks):]:
        ax.set_axis_off()
    for ax, benchmark in zip(axes.flat, benchmarks, strict=False):
        part = orderings[orderings["benchmark"] == benchmark]
        order = [c for c in configs if c in set(part["config"])]
        x_of = {config: i for i, config in enumerate(order)}
        for index, (model, rows) in enumerate(part.groupby("model", sort=True)):
            rows = rows.assign(x=rows["config"].map(x_of)).sort_values("x")
            ax.plot(rows["x"], rows["rank"], marker="o", color=f"C{index % 10}", label=model)
            flipped = rows[rows["flipped_with"].astype(str).str.len() > 0]
            ax.scatter(flipped["x"], flipped["rank"], s=160, facecolors="none",
                       edgecolors="red", linewidths=1.4, zorder=3)
        taus = part.groupby("config")["kendall_tau_vs_consensus"].first()
        ax.set_xticks(range(len(order)), [f"{number[c]}\ntau {taus[c]:+.2f}" for c in order],
                      fontsize=7)
        ax.set_yticks(range(1, n_models + 1))
        ax.set_ylim(n_models + 0.5, 0.5)
        ax.set_ylabel("rank (1 = highest)")
        ax.set_title(f"{benchmark}: model ranks per condition", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], marker="o", linestyle="none", markerfacecolor="none",
                              markeredgecolor="red", markersize=10))
    labels.append("ordered against the consensus")
    fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
    caption = [f"{number[c]}: {names[c]}" for c in configs]
    fig.supxlabel("\n".join(caption + ([f"all conditions: {fixed}"] if fixed else [])),
                  fontsize=6.5, x=0.01, ha="left")
    return fig


def _condition_names(configs: list[str]) -> tuple[dict[str, str], str]:
    """Each condition by the factors that vary between conditions, and the fixed ones."""
    parsed = {c: dict(part.partition("=")[::2] for part in c.split("|") if part)
              for c in configs}
    keys = list(dict.fromkeys(k for p in parsed.values() for k in p))
    varying = [k for k in keys if len({p.get(k) for p in parsed.values()}) > 1]
    names = {c: ", ".join(f"{k}={p[k]}" for k in varying if k in p) or c
             for c, p in parsed.items()}
    fixed = ", ".join(f"{k}={next(iter(parsed.values()))[k]}" for k in keys
                      if k not in varying and all(k in p for p in parsed.values()))
    return names, fixed


def _saving_error(run: pd.Series, ratio: str) -> list[list[float]] | None:
    """Asymmetric error bar of ``100 x (1 - ratio)`` from the ratio's interval (None: none)."""
    low, high = run.get(f"{ratio}_ci_low"), run.get(f"{ratio}_ci_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    saving = 100 * (1 - run[ratio])
    return [[saving - 100 * (1 - high)], [100 * (1 - low) - saving]]


def savings(runs: pd.DataFrame) -> Figure | None:
    """Runtime saving vs energy saving relative to the reference, with the y = x diagonal.

    Error bars: the ratios' 95% intervals; a hollow marker: a run whose execution mode differs
    from the reference's (its savings measure the mode as well as the change).
    """
    data = runs[~runs["is_reference"]].dropna(subset=["runtime_saving_pct", "energy_saving_pct"])
    if data.empty:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 4.6), layout="constrained")
    for index, (_, run) in enumerate(data.iterrows()):
        color = f"C{index % 10}"
        mixed = bool(run.get("modes_differ", False))
        ax.errorbar(run["runtime_saving_pct"], run["energy_saving_pct"],
                    xerr=_saving_error(run, "runtime_ratio"),
                    yerr=_saving_error(run, "energy_ratio"), marker=MARKERS[index % len(MARKERS)],
                    color=color, markerfacecolor="none" if mixed else color, capsize=2,
                    linestyle="none",
                    label=run["run"] + (" (mode differs)" if mixed else ""))
    low = min(data["runtime_saving_pct"].min(), data["energy_saving_pct"].min(), 0) - 5
    high = max(data["runtime_saving_pct"].max(), data["energy_saving_pct"].max(), 0) + 5
    ax.plot([low, high], [low, high], color="grey", linestyle="--", linewidth=1,
            label="equal savings")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.axvline(0, color="black", linewidth=0.5)
    ax.set_xlabel("runtime saving vs reference (%)")
    ax.set_ylabel("energy saving vs reference (%)")
    fig.legend(loc="outside lower center", fontsize=7, ncols=2, frameon=False)
    return fig
