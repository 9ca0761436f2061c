"""Template-level clustering, checked against statsmodels' cluster-robust SE."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership


@pytest.fixture(scope="module")
def instrument_rows(data_dir):
    return load_membership("instrument").rows


def _cluster_robust_se(d: np.ndarray, groups: pd.Series) -> float:
    """statsmodels OLS of d on a constant with cluster-robust (CR1) errors: the SE of mean(d)."""
    codes = pd.factorize(groups)[0]
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": codes})
    return float(fit.bse[0])


def test_template_clustering_resamples_bbq_templates(instrument_rows, tmp_path):
    """Run outcomes that move together within a template: the template-level interval is
    wider, and each interval's width matches the cluster-robust SE for its own grouping."""
    rows = instrument_rows
    frame = pd.DataFrame(rows)
    templates = frame["category"] + ":q" + frame["question_index"].astype(str)
    assert frame["unit_id"].nunique() == 500 and templates.nunique() == 231  # the instrument
    rng = np.random.default_rng(10)
    ref = simulate_predictions(rows, 0.6, rng)
    labels = frame["label"].to_numpy()
    moved = templates.isin(rng.choice(templates.unique(), 60, replace=False)).to_numpy()
    run = np.where(moved & (rng.random(len(rows)) < 0.8), labels, ref)  # template-level gains
    write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, ref)
    write_run(tmp_path / "run", "bbq_instrument_loglik", rows, run)
    result = analyze(tmp_path / "ref", [tmp_path / "run"], n_resamples=2000, mc_draws=10,
                     progress=False, cluster="template")
    assert result.n_clusters == 231 and result.settings["cluster"] == "template"
    row = result.clustering.query("metric == 'accuracy'").iloc[0]
    assert (row["n_clusters_unit"], row["n_clusters_template"]) == (500, 231)
    d = (run == labels).astype(float) - (ref == labels).astype(float)
    assert row["delta_pp"] == pytest.approx(100 * d.mean())
    for name, groups in (("unit", frame["unit_id"]), ("template", templates)):
        se_bootstrap = (row[f"ci_high_{name}"] - row[f"ci_low_{name}"]) / (2 * 1.96) / 100
        assert se_bootstrap == pytest.approx(_cluster_robust_se(d, groups), rel=0.1), name
    assert _cluster_robust_se(d, templates) > 1.1 * _cluster_robust_se(d, frame["unit_id"])
    overall = result.deltas.query("metric == 'accuracy' and subgroup_type == 'all'").iloc[0]
    assert overall["n_clusters"] == 231  # the primary analysis resampled templates
    assert bool(row["depends_on_clustering"]) == (row["verdict_unit"] != row["verdict_template"])


def test_an_unknown_cluster_unit_is_refused(instrument_rows, tmp_path):
    from lm_eval_ext.analysis import AnalysisInputError

    with pytest.raises(AnalysisInputError, match="--cluster 'item': use one of unit, template"):
        analyze(tmp_path, [tmp_path], cluster="item")


def test_a_single_template_is_no_verdict_that_depends_on_clustering(instrument_rows, tmp_path):
    """Two units of one template, identical answers: the unit verdict is "no change detected",
    the template one cannot be reached (one cluster), and the console and report listed every
    metric as depending on the clustering unit."""
    frame = pd.DataFrame(instrument_rows)
    templates = frame["category"] + ":q" + frame["question_index"].astype(str)
    units = frame.groupby(templates)["unit_id"].unique()
    template = next(t for t, u in units.items() if len(u) >= 2)
    picked = frame.index[frame["unit_id"].isin(units[template][:2])]
    rows = [instrument_rows[i] for i in picked]
    preds = simulate_predictions(rows, 0.6, np.random.default_rng(3))
    write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, preds)
    write_run(tmp_path / "run", "bbq_instrument_loglik", rows, preds, batch_size=8)
    result = analyze(tmp_path / "ref", [tmp_path / "run"], n_resamples=200, mc_draws=10,
                     progress=False)
    table = result.clustering
    assert set(table["n_clusters_template"]) == {1} and set(table["n_clusters_unit"]) == {2}
    assert set(table["verdict_template"]) == {"not estimable"}
    assert not table["comparable"].any() and not table["depends_on_clustering"].any()
