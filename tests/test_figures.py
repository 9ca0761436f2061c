"""The report's figures at paper scale (5 runs x 2,000 instrument items, synthetic answers) and
on a small run: each renders, quality vs cost shows every run with the reference, no two texts
overlap (rendered bounding boxes), heatmap colour scales are symmetric, the rank-flip chart
draws each condition's ranks."""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.image import AxesImage
from matplotlib.text import Text

from lm_eval_ext.analysis import analyze, figures
from lm_eval_ext.analysis.report import ANALYSIS_OUTPUTS, write_outputs
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership

TASK = "bbq_instrument_loglik"


def _write_runs(folder, rows, accuracies, *, energy: bool, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    base = simulate_predictions(rows, accuracies[0], rng)
    paths = []
    for index, accuracy in enumerate(accuracies):
        preds = base if index == 0 else simulate_predictions(rows, accuracy, rng, base=base,
                                                              flip_rate=0.2)
        path = folder / f"run{index}"
        write_run(path, TASK, rows, preds, model="smollm2-135m-instruct",
                  precision=["bf16", "int8", "nf4", "fp16", "fp32"][index], batch_size=32,
                  energy_joules=(8000.0 / (index + 1)) if energy else None,
                  inference_seconds=60.0 / (index + 1))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def paper_scale(tmp_path_factory):
    rows = load_membership("instrument").rows
    paths = _write_runs(tmp_path_factory.mktemp("paper"), rows, [0.6, 0.58, 0.55, 0.6, 0.62],
                        energy=True)
    return analyze(paths[0], paths[1:], n_resamples=200, mc_draws=30, seed=0, progress=False)


@pytest.fixture(scope="module")
def small_scale(tmp_path_factory):
    rows = load_membership("instrument").rows[:40]
    paths = _write_runs(tmp_path_factory.mktemp("small"), rows, [0.5, 0.45], energy=False)
    return analyze(paths[0], paths[1:], n_resamples=200, mc_draws=30, seed=0, progress=False)


def _undrawn_tick_labels(fig) -> set[int]:
    """Tick labels matplotlib keeps but does not draw (their tick is outside the view)."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            pad = 1e-9 * max(abs(low), abs(high), 1.0)
            for ticks in (axis.get_major_ticks(), axis.get_minor_ticks()):
                for tick in ticks:
                    if not low - pad <= tick.get_loc() <= high + pad:
                        hidden.update({id(tick.label1), id(tick.label2)})
    return hidden


def texts(fig) -> list[Text]:
    """Every text object of a figure, table cells included (findobj does not reach those)."""
    cells = [cell.get_text() for ax in fig.axes for table in ax.tables
             for cell in table.get_celld().values()]
    return fig.findobj(Text) + cells


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of drawn, non-empty texts whose rendered boxes overlap by more than 1 px."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = _undrawn_tick_labels(fig)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts(fig)
             if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    boxes = [(text, box) for text, box in boxes if np.isfinite(box.get_points()).all()]
    if len(boxes) < 2:
        return []
    corners = np.array([[box.x0, box.y0, box.x1, box.y1] for _, box in boxes])
    width = (np.minimum(corners[:, None, 2], corners[None, :, 2])
             - np.maximum(corners[:, None, 0], corners[None, :, 0]))
    height = (np.minimum(corners[:, None, 3], corners[None, :, 3])
              - np.maximum(corners[:, None, 1], corners[None, :, 1]))
    first, second = np.nonzero(np.triu((width > 1) & (height > 1), k=1))
    return [(boxes[i][0], boxes[j][0]) for i, j in zip(first, second, strict=True)]


def _every_figure(result) -> dict:
    overall = result.deltas[result.deltas["subgroup_type"] == "all"].drop_duplicates(
        ["run", "metric"])
    made = {"quality_vs_cost": figures.quality_vs_cost(result.runs, overall),
            "subset_size": figures.subset_size(result.membership_summary,
                                               result.membership_draws,
                                               result.membership_frozen),
            "subset_size_pp": figures.subset_size(result.membership_summary,
                                                  result.membership_draws,
                                                  result.membership_frozen, as_delta_pp=True),
            "savings": figures.savings(result.runs)}
    for subgroup_type in ("category", "demographic_group", "context_polarity"):
        made[subgroup_type] = figures.delta_heatmap(result.deltas, subgroup_type)
    return made


@pytest.mark.parametrize("scale", ["paper_scale", "small_scale"])
def test_every_figure_renders_without_overlapping_text(scale, request, tmp_path):
    result = request.getfixturevalue(scale)
    made = _every_figure(result)
    expected = {"quality_vs_cost", "subset_size", "subset_size_pp", "category",
                "context_polarity"} | ({"demographic_group"} if scale == "paper_scale" else set())
    assert expected <= {name for name, fig in made.items() if fig is not None}
    for name, fig in made.items():
        if fig is None:
            continue
        assert overlapping_texts(fig) == [], name
        path = figures.save(fig, tmp_path / f"{name}.png")
        assert path.stat().st_size > 5_000, name


def test_quality_vs_cost_shows_every_run_and_the_reference_with_intervals(paper_scale):
    overall = paper_scale.deltas[paper_scale.deltas["subgroup_type"] == "all"].drop_duplicates(
        ["run", "metric"])
    fig = figures.quality_vs_cost(paper_scale.runs, overall)
    [legend] = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == 5 and sum(label.endswith("(reference)") for label in labels) == 1
    accuracy = next(ax for ax in fig.axes if ax.get_title() == "accuracy")
    bars = [c for c in accuracy.containers if c.has_yerr]
    assert len(bars) == 5  # the reference too, with its own interval
    ref = overall[overall["metric"] == "accuracy"].iloc[0]
    assert ref["reference_ci_low"] < ref["reference"] < ref["reference_ci_high"]
    assert "joules per item" in fig._suptitle.get_text()
    plt.close(fig)


def test_without_energy_the_x_axis_is_seconds_and_says_so(small_scale):
    overall = small_scale.deltas[small_scale.deltas["subgroup_type"] == "all"]
    fig = figures.quality_vs_cost(small_scale.runs, overall.drop_duplicates(["run", "metric"]))
    assert "seconds per item (energy not measured)" in fig._suptitle.get_text()
    plt.close(fig)


def test_heatmap_scales_are_symmetric_and_significant_cells_marked(paper_scale):
    fig = figures.delta_heatmap(paper_scale.deltas, "category")
    images = [a for ax in fig.axes for a in ax.get_children() if isinstance(a, AxesImage)]
    assert len(images) == paper_scale.deltas["metric"].nunique()
    for image in images:
        assert image.norm.vmin == pytest.approx(-image.norm.vmax)
    cells = paper_scale.deltas[paper_scale.deltas["subgroup_type"] == "category"]
    starred = sum(t.get_text().endswith("*") for t in fig.findobj(Text))
    assert starred == int((cells["p_adjusted"] < figures.SIGNIFICANT).sum())
    plt.close(fig)


def test_a_metric_undefined_in_every_subgroup_has_no_panel(paper_scale):
    """An analysis of ambiguous items only (bias_s_dis undefined everywhere) leaked
    matplotlib's "identical low and high xlims" warning from an empty panel."""
    import warnings

    undefined = paper_scale.deltas.copy()
    undefined.loc[undefined["metric"] == "bias_s_dis", "delta_pp"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.delta_heatmap(undefined, "category")
    images = [a for ax in fig.axes for a in ax.get_children() if isinstance(a, AxesImage)]
    assert len(images) == paper_scale.deltas["metric"].nunique() - 1
    assert not any("bias_s_dis" in ax.get_title() for ax in fig.axes)
    plt.close(fig)


def test_one_category_is_a_table_not_a_block(small_scale):
    one = small_scale.deltas.assign(subgroup_type="category", subgroup="Age")
    one = one.drop_duplicates(["run", "metric"])
    fig = figures.delta_heatmap(one, "category")
    assert not [a for ax in fig.axes for a in ax.get_children() if isinstance(a, AxesImage)]
    assert any(t.get_text() == "Holm p" for t in texts(fig))
    assert overlapping_texts(fig) == []
    plt.close(fig)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """3 models x 3 precisions on 200 items; at nf4 models b and c swap places."""
    rows = load_membership("instrument").rows[:200]
    rng = np.random.default_rng(1)
    folder = tmp_path_factory.mktemp("grid")
    accuracy = {("a", "bf16"): 0.7, ("b", "bf16"): 0.55, ("c", "bf16"): 0.4,
                ("a", "int8"): 0.7, ("b", "int8"): 0.56, ("c", "int8"): 0.41,
                ("a", "nf4"): 0.68, ("b", "nf4"): 0.38, ("c", "nf4"): 0.52}
    paths = []
    for (model, precision), acc in accuracy.items():
        path = folder / f"{model}_{precision}"
        labels = np.array([int(r["label"]) for r in rows])
        correct = rng.permutation(len(rows)) < round(acc * len(rows))
        write_run(path, TASK, rows, np.where(correct, labels, (labels + 1) % 3), model=model,
                  precision=precision, energy_joules=100.0, inference_seconds=1.0)
        paths.append(path)
    return analyze(paths[0], paths[1:2], grid=paths, n_resamples=200, mc_draws=10, seed=0,
                   progress=False)


def test_rank_flip_chart_draws_each_conditions_ranks_and_marks_the_flip(grid):
    orderings = grid.grid_orderings
    flips = grid.rank_flips[grid.rank_flips["envelope"] == "full"].set_index(
        ["model_a", "model_b"])
    assert flips.loc[("b", "c"), "rho_flip"] == pytest.approx(1 / 3)
    assert flips.loc[("b", "c"), "rho_flip_ci_low"] > flips.loc[("b", "c"), "ordering_noise"]
    assert flips.loc[("b", "c"), "beyond_noise"] and not flips.loc[("a", "b"), "beyond_noise"]
    nf4 = orderings[orderings["config"].str.contains("nf4")].set_index("model")
    assert nf4.loc["b", "flipped_with"] == "c" and nf4.loc["a", "flipped_with"] == ""
    assert nf4["kendall_tau_vs_consensus"].iloc[0] == pytest.approx(1 / 3)
    fig = figures.rank_flips(orderings)
    [ax] = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label() in {"a", "b", "c"}]
    assert len(lines) == 3 and all(len(line.get_xdata()) == 3 for line in lines)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert any("tau +0.33" in t for t in ticks) and sum("tau +1.00" in t for t in ticks) == 2
    caption = fig.get_supxlabel().splitlines()  # conditions by what varies between them
    assert caption[:3] == ["C1: precision=bf16", "C2: precision=int8", "C3: precision=nf4"]
    assert caption[3].startswith("all conditions: batch_size=1, ")
    assert overlapping_texts(fig) == []
    plt.close(fig)


def test_rank_flip_chart_wraps_many_benchmarks_three_to_a_row(grid):
    orderings = pd.concat([grid.grid_orderings.assign(benchmark=f"bench{i}") for i in range(4)])
    fig = figures.rank_flips(orderings)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 6 and len(drawn) == 4
    assert [ax.get_title().split(":")[0] for ax in drawn] == [f"bench{i}" for i in range(4)]
    assert overlapping_texts(fig) == []
    plt.close(fig)


def test_report_writes_the_new_figures(small_scale, grid, tmp_path):
    paths = write_outputs(grid, tmp_path / "grid")
    assert paths["rank_flips"].stat().st_size > 5_000
    assert (tmp_path / "grid" / "grid_orderings.csv").is_file()
    paths = write_outputs(small_scale, tmp_path / "small")
    assert paths["quality_vs_cost"].stat().st_size > 10_000
    assert "![quality_vs_cost](figures/quality_vs_cost.png)" in paths["report_md"].read_text()
    # what --overwrite may replace is exactly what analyze writes (the rest is the user's)
    for folder in (tmp_path / "grid", tmp_path / "small"):
        written = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        assert "report.md" in written and written <= ANALYSIS_OUTPUTS, written - ANALYSIS_OUTPUTS


def test_the_overlap_check_finds_overlapping_texts():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "first label")
    ax.text(0.52, 0.5, "second label")
    ax.text(0.1, 0.1, "apart")
    assert overlapping_texts(fig) == [("first label", "second label")]
    plt.close(fig)


def test_subset_sizes_cut_to_one_item_count_draw_without_a_warning():
    """Under --intersection two sizes can keep the same items: the x axis collapsed to one
    point and matplotlib's singular-limits warning reached the console (trial 2)."""
    summary = pd.DataFrame({"metric": "accuracy", "size_units": [10, 20],
                            "size_items": [3, 3], "full_value": 0.5})
    draws = pd.DataFrame({"metric": "accuracy", "size_units": [10, 10, 20, 20],
                          "value": [0.4, 0.6, 0.5, 0.5]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.subset_size(summary, draws, pd.DataFrame())
    low, high = fig.axes[0].get_xlim()
    assert (low, high) == (2.0, 4.0)  # the lone position +- 1 item
    plt.close(fig)
