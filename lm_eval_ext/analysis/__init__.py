"""Did the conclusion change? Paired analysis of lm-eval runs.

Entry points: :func:`analyze` and :func:`analyze_to_folder` (``lm-eval-ext analyze``),
:func:`~lm_eval_ext.analysis.recommendation.recommend_from_pilots` (``lm-eval-ext recommend``),
the power helpers (:func:`paired_mde`, ``lm-eval-ext mde``), the readers of lm-eval output
folders (:func:`load_run`, :func:`find_results`, :func:`read_samples`), and the statistics in
:mod:`lm_eval_ext.analysis.stats` (no I/O there), re-exported below. Benchmarks and other tools
use these names only.
"""

from lm_eval_ext.analysis.errors import AnalysisInputError, DegenerateDataWarning
from lm_eval_ext.analysis.loader import (
    Run,
    find_results,
    load_run,
    load_runs,
    read_json,
    read_samples,
    samples_path,
)
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, MetricSpec
from lm_eval_ext.analysis.pipeline import AnalysisResult, analyze
from lm_eval_ext.analysis.report import analyze_to_folder, write_outputs
from lm_eval_ext.analysis.stats.bootstrap import (
    ClusterDesign,
    ConfidenceInterval,
    permutation_pvalues,
)
from lm_eval_ext.analysis.stats.group_sequential import SequentialPlan, decide, final_mde
from lm_eval_ext.analysis.stats.linearised import linearised_delta, linearised_deltas
from lm_eval_ext.analysis.stats.paired import (
    McNemarResult,
    PairedDelta,
    mcnemar_exact,
    paired_delta,
)
from lm_eval_ext.analysis.stats.power import (
    binomial_sd,
    design_effect,
    discordance_rate,
    paired_mde,
    preregistration_card,
    qri,
    required_items,
)
from lm_eval_ext.analysis.stats.rank_flips import (
    rank_flip_table,
    ranking_summary,
    variance_shares,
)
from lm_eval_ext.analysis.stats.subgroups import benjamini_hochberg, holm

__all__ = [
    "ACCURACY", "BIAS_S_AMB", "BIAS_S_DIS", "AnalysisInputError", "AnalysisResult",
    "ClusterDesign", "ConfidenceInterval", "DegenerateDataWarning", "McNemarResult",
    "MetricSpec", "PairedDelta", "Run", "SequentialPlan", "analyze", "benjamini_hochberg",
    "binomial_sd", "decide", "design_effect", "discordance_rate", "final_mde", "find_results",
    "holm", "linearised_delta", "linearised_deltas", "load_run", "load_runs", "mcnemar_exact",
    "paired_delta", "paired_mde", "permutation_pvalues", "preregistration_card", "qri", "rank_flip_table",
    "ranking_summary", "read_json", "read_samples", "required_items", "samples_path",
    "variance_shares", "write_outputs", "analyze_to_folder",
]
