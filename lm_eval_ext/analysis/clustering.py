"""Does a verdict depend on the clustering unit (natural unit or BBQ template)?

The primary analysis resamples one clustering unit (``analyze --cluster``: ``unit``, the
natural unit of BBQ's 4 rows, or ``template``, the category x question_index that several units
share). This table repeats each run's overall delta per metric under the other unit and says
where the verdict differs, so that a conclusion resting on the choice is visible.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import pandas as pd

from lm_eval_ext.analysis.claims import NOT_ESTIMABLE, verdict
from lm_eval_ext.analysis.errors import AnalysisInputError, DegenerateDataWarning
from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign
from lm_eval_ext.analysis.stats.paired import paired_delta

#: --cluster choice -> the per-item column that names the cluster
CLUSTER_COLUMNS = {"unit": "unit_id", "template": "template_id"}


def cluster_column(cluster: str) -> str:
    """The items column of a ``--cluster`` choice (an error naming the choices otherwise)."""
    if cluster not in CLUSTER_COLUMNS:
        raise AnalysisInputError(f"--cluster {cluster!r}: use one of {', '.join(CLUSTER_COLUMNS)}")
    return CLUSTER_COLUMNS[cluster]


def clustering_sensitivity(specs: Sequence[MetricSpec], ref_items: pd.DataFrame,
                           run_items: Mapping[str, pd.DataFrame], deltas: pd.DataFrame,
                           cluster: str, *, n_resamples: int, rng,
                           level: float) -> pd.DataFrame | None:
    """Overall verdict of every run x metric under unit and template clustering.

    The chosen clustering's columns are the primary analysis's own overall rows of ``deltas``;
    only the other clustering is resampled here. ``comparable`` is False where either verdict is
    not estimable (e.g. one template), and such a pair never "depends on clustering". None when
    templates and units coincide (every benchmark but BBQ), as the table would repeat the
    analysis.
    """
    units, templates = ref_items["unit_id"].astype(str), ref_items["template_id"].astype(str)
    if units.nunique() == templates.nunique():
        return None
    other = next(name for name in CLUSTER_COLUMNS if name != cluster)
    design = ClusterDesign.build(ref_items[CLUSTER_COLUMNS[other]], n_resamples, rng)
    primary = deltas[deltas["subgroup_type"] == "all"].set_index(["run", "metric"])
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        for run, items in run_items.items():
            for spec in specs:
                mine = primary.loc[(run, spec.name)]
                d = paired_delta(spec, ref_items, items, design, level=level)
                row = {"run": run, "metric": spec.name, "delta_pp": mine["delta_pp"],
                       **_columns(cluster, int(mine["n_clusters"]), mine["ci_low"],
                                  mine["ci_high"], mine["p_value"], level),
                       **_columns(other, d.n_clusters, spec.scale * d.ci.low,
                                  spec.scale * d.ci.high, d.pvalue, level)}
                # a verdict that cannot be reached (one cluster, an undefined metric) is no
                # different verdict: the pair is not comparable
                row["comparable"] = not any(row[f"verdict_{name}"] == NOT_ESTIMABLE
                                            for name in CLUSTER_COLUMNS)
                row["depends_on_clustering"] = (row["comparable"] and
                                                row["verdict_unit"] != row["verdict_template"])
                rows.append(row)
    return pd.DataFrame(rows)


def _columns(name: str, n_clusters: int, low_pp: float, high_pp: float, pvalue: float,
             level: float) -> dict:
    """One clustering's interval (points), p and verdict."""
    return {f"n_clusters_{name}": n_clusters, f"ci_low_{name}": low_pp,
            f"ci_high_{name}": high_pp, f"p_value_{name}": pvalue,
            f"verdict_{name}": verdict(low_pp, high_pp, pvalue, level)}
