"""One model through several harnesses: lm-eval, Inspect AI and HELM.

* :mod:`.readers`: lm-eval output folders, Inspect logs and HELM run folders as per-item frames;
* :mod:`.compare`: scores as each harness defines them, paired agreement on common items, and an
  attribution of the difference whose parts add up (``lm-eval-ext compare-harness``);
* :mod:`.inspect_tasks`: our BBQ and XSTest tasks as Inspect AI tasks (the ``inspect_ai`` entry
  point), so the same prompts and scoring can run there.

It reads outputs and reuses the analysis's statistics; nothing in the analysis imports it.
"""

from lm_eval_ext.cross_harness.compare import (
    HARNESS_OUTPUTS,
    HarnessComparison,
    compare_harnesses,
    write_harness_report,
)
from lm_eval_ext.cross_harness.readers import (
    HarnessRun,
    read_harness_run,
    read_harness_runs,
    write_bbq_manifest,
)

__all__ = ["HARNESS_OUTPUTS", "HarnessComparison", "HarnessRun", "compare_harnesses",
           "read_harness_run", "read_harness_runs", "write_bbq_manifest", "write_harness_report"]
