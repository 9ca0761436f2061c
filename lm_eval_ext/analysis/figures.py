"""Figures of the analysis report. They only read the result tables; no statistics here."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def metric_vs_energy(runs: pd.DataFrame, overall: pd.DataFrame, path: Path) -> Path | None:
    """Accuracy and BBQ bias of every run against its energy (log axis).

    When no run has measured energy (a CPU machine without RAPL), the x axis is inference
    seconds instead, and says so.
    """
    energy = pd.to_numeric(runs["energy_joules"], errors="coerce")
    seconds = pd.to_numeric(runs["inference_seconds"], errors="coerce")
    if (energy > 0).any():
        x, label = energy, "inference energy (J, log scale)"
    elif (seconds > 0).any():
        x, label = seconds, "inference seconds (log scale; energy not measured)"
    else:
        return None
    metrics = [m for m in ("accuracy", "bias_s_dis", "bias_s_amb") if m in set(overall["metric"])]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=False):
        values = overall[overall["metric"] == metric].set_index("run")["value"]
        for index, run in runs.iterrows():
            if run["run"] in values and x[index] > 0:
                ax.scatter(x[index], values[run["run"]], s=36,
                           marker="*" if run["is_reference"] else "o")
                ax.annotate(run["run"][:24], (x[index], values[run["run"]]), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} vs cost", fontsize=9)
    return _save(fig, path)


def subset_size(summary: pd.DataFrame, draws: pd.DataFrame, frozen: pd.DataFrame,
                path: Path) -> Path | None:
    """Metric against subset size: Monte Carlo spread (boxes) and frozen memberships (dots)."""
    metrics = list(summary["metric"].unique()) if len(summary) else []
    if not metrics:
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=False):
        s = summary[summary["metric"] == metric].sort_values("size_units")
        d = draws[draws["metric"] == metric]
        groups = [d[d["size_units"] == u]["value"].dropna().to_numpy() for u in s["size_units"]]
        positions = s["size_items"].to_numpy()
        width = 0.08 * (positions.max() - positions.min() + 1)
        ax.boxplot(groups, positions=positions, widths=width, showfliers=False,
                   manage_ticks=False)
        f = frozen[frozen["metric"] == metric] if len(frozen) else frozen
        if len(f):
            items_of = dict(zip(s["size_units"], s["size_items"], strict=False))
            ax.scatter([items_of.get(u, np.nan) for u in f["size_units"]], f["value"],
                       color="C3", zorder=3, s=18, label="frozen memberships")
            ax.legend(fontsize=7)
        ax.axhline(s["full_value"].iloc[0], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("subset size (items)")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} by subset size", fontsize=9)
    return _save(fig, path)


def delta_heatmap(deltas: pd.DataFrame, subgroup_type: str, path: Path) -> Path | None:
    """Runs x subgroups heatmaps of signed deltas (points), one panel per metric.

    Diverging colours centred on 0.
    """
    data = deltas[deltas["subgroup_type"] == subgroup_type]
    metrics = list(data["metric"].unique())
    if not metrics:
        return None
    columns = data["subgroup"].nunique()
    fig, axes = plt.subplots(len(metrics), 1, squeeze=False, gridspec_kw={"hspace": 1.1},
                             figsize=(max(6, 0.45 * columns + 3),
                                      len(metrics) * (0.45 * data["run"].nunique() + 2.4)))
    for ax, metric in zip(axes[:, 0], metrics, strict=False):
        wide = data[data["metric"] == metric].pivot_table(index="run", columns="subgroup",
                                                          values="delta_pp")
        values = wide.to_numpy()
        limit = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
        image = ax.imshow(values, cmap="RdBu_r", aspect="auto",
                          norm=TwoSlopeNorm(vcenter=0, vmin=-limit - 1e-9, vmax=limit + 1e-9))
        ax.set_xticks(range(wide.shape[1]), wide.columns, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(wide.shape[0]), [r[:30] for r in wide.index], fontsize=7)
        fig.colorbar(image, ax=ax, label="delta (pp)")
        ax.set_title(f"{metric} delta vs reference by {subgroup_type}", fontsize=9)
    return _save(fig, path)


def savings(runs: pd.DataFrame, path: Path) -> Path | None:
    """Runtime saving vs energy saving relative to the reference, with the y = x diagonal."""
    data = runs[~runs["is_reference"]].dropna(subset=["runtime_saving_pct", "energy_saving_pct"])
    if data.empty:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.scatter(data["runtime_saving_pct"], data["energy_saving_pct"])
    for _, run in data.iterrows():
        ax.annotate(run["run"][:24], (run["runtime_saving_pct"], run["energy_saving_pct"]),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    low = min(data["runtime_saving_pct"].min(), data["energy_saving_pct"].min(), 0) - 5
    high = max(data["runtime_saving_pct"].max(), data["energy_saving_pct"].max(), 0) + 5
    ax.plot([low, high], [low, high], color="grey", linestyle="--", linewidth=1,
            label="equal savings")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.axvline(0, color="black", linewidth=0.5)
    ax.set_xlabel("runtime saving vs reference (%)")
    ax.set_ylabel("energy saving vs reference (%)")
    ax.legend(fontsize=7)
    return _save(fig, path)
