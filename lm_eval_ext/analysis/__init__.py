"""Did the conclusion change? Paired analysis of lm-eval runs.

Entry points: :func:`analyze` (and ``lm-eval-ext analyze``), the power helpers
(:func:`paired_mde`, ``lm-eval-ext mde``), and the building blocks re-exported below.
"""

from lm_eval_ext.analysis.bootstrap import ClusterDesign, ConfidenceInterval
from lm_eval_ext.analysis.errors import AnalysisInputError, DegenerateDataWarning
from lm_eval_ext.analysis.loader import Run, load_run, load_runs
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, MetricSpec
from lm_eval_ext.analysis.paired import McNemarResult, PairedDelta, mcnemar_exact, paired_delta
from lm_eval_ext.analysis.pipeline import AnalysisResult, analyze
from lm_eval_ext.analysis.power import (
    binomial_sd,
    design_effect,
    discordance_rate,
    paired_mde,
    preregistration_card,
    qri,
    required_items,
)
from lm_eval_ext.analysis.rank_flips import rank_flip_table, ranking_summary, variance_shares
from lm_eval_ext.analysis.report import write_outputs
from lm_eval_ext.analysis.subgroups import benjamini_hochberg, holm

__all__ = [
    "ACCURACY", "BIAS_S_AMB", "BIAS_S_DIS", "AnalysisInputError", "AnalysisResult",
    "ClusterDesign", "ConfidenceInterval", "DegenerateDataWarning", "McNemarResult",
    "MetricSpec", "PairedDelta", "Run", "analyze", "benjamini_hochberg", "binomial_sd",
    "design_effect", "discordance_rate", "holm", "load_run", "load_runs", "mcnemar_exact", "paired_delta",
    "paired_mde", "preregistration_card", "qri", "rank_flip_table", "ranking_summary",
    "required_items", "variance_shares", "write_outputs",
]
