"""The names of lm-eval's output files: ``results_<stamp>.json`` and its samples beside it.

One rule for every reader (the analysis loader, a derived run's parent, campaigns, the judge).
"""

from __future__ import annotations

import re
from pathlib import Path

#: ``results_<stamp>.json``; the stamp names the run's other files
RESULTS_NAME = re.compile(r"^results_(?P<stamp>.+)\.json$")


def results_stamp(results_path: Path) -> str:
    """The timestamp of ``results_<stamp>.json`` that names the run's other files."""
    return RESULTS_NAME.match(results_path.name).group("stamp")


def samples_path(results_path: Path, task: str) -> Path:
    """lm-eval's samples file of ``task`` beside a results file."""
    return results_path.parent / f"samples_{task}_{results_stamp(results_path)}.jsonl"
