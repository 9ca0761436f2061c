"""Power inputs estimated from two real runs (``lm-eval-ext mde --runs REFERENCE RUN``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.pairing import align, aligned_items, how_runs_differ, refuse_repeated_runs
from lm_eval_ext.analysis.stats.power import (
    design_effect,
    discordance_rate,
    usable_design_effect,
)


@dataclass(frozen=True)
class PairedPowerInputs:
    """What two runs say about the paired design.

    Attributes:
        rho_d: Share of paired items whose correctness differs.
        design_effect: Variance inflation of the natural-unit clusters (as estimated).
        usable_design_effect: The same, floored where the estimate cannot be used.
        m: Paired items (the runs' common items).
        dropped: Run id -> its items left out because the other run lacks them.
    """

    rho_d: float
    design_effect: float
    usable_design_effect: float
    m: int
    dropped: dict[str, int] = field(default_factory=dict)


def paired_inputs_from_runs(reference: str | Path, run: str | Path) -> PairedPowerInputs:
    """Discordance rate, design effect and item count of ``run`` against ``reference``."""
    ref, other = load_runs([reference, run])
    refuse_repeated_runs([ref, other])
    differs = how_runs_differ(ref, other)
    if differs:
        raise AnalysisInputError(f"mde --runs: {ref.run_id} and {other.run_id} differ in {differs}; "
                                 "a discordance rate needs two runs of one task and scoring path")
    alignment = align(ref, [other], intersection=True)
    ref_items, run_items = aligned_items(ref, alignment), aligned_items(other, alignment)
    rho_d = discordance_rate(ref_items["correct"], run_items["correct"])
    deff = design_effect(run_items["correct"].to_numpy(float)
                         - ref_items["correct"].to_numpy(float), ref_items["unit_id"])
    return PairedPowerInputs(rho_d, deff, usable_design_effect(deff), alignment.n,
                             {k: v for k, v in alignment.dropped.items() if v})


def discordance_upper_bound(m: int, alpha: float = 0.05) -> float:
    """The one-sided ``1 - alpha`` upper confidence bound on rho_d after no discordant item.

    Clopper-Pearson with 0 of ``m``: ``1 - alpha ** (1 / m)`` (about ``3 / m`` at alpha 0.05,
    the "rule of three"). Two runs that agree on every item give rho_d = 0, for which the MDE
    is undefined; at this bound it is an upper bound on the MDE.
    """
    return 1 - alpha ** (1 / m)
