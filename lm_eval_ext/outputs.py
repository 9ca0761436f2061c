"""The names of lm-eval's output files: ``results_<stamp>.json`` and its samples beside it.

One rule for every reader (the analysis loader, a derived run's parent, campaigns, the judge).
Given ``--output_path X.json``, lm-eval writes ``X_<stamp>.json`` (its own date stamp) with the
samples beside it; that name is a results file too.
"""

from __future__ import annotations

import re
from pathlib import Path

#: lm-eval's date stamp (``datetime.now().isoformat()`` with ``-`` for ``:``)
STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
#: ``results_<stamp>.json``, or ``X_<stamp>.json`` of ``--output_path X.json`` (not the
#: judge's summaries, ``judge_<task>_<stamp>.json``); the stamp names the run's other files
RESULTS_NAME = re.compile(rf"^(?:results_(?P<stamp>.+)|(?!judge_)(?P<stem>.+)_"
                          rf"(?P<file_stamp>{STAMP}))\.json$")


def results_stamp(results_path: Path) -> str:
    """The timestamp of ``results_<stamp>.json`` that names the run's other files."""
    match = RESULTS_NAME.match(results_path.name)
    return match.group("stamp") or match.group("file_stamp")


def samples_path(results_path: Path, task: str) -> Path:
    """lm-eval's samples file of ``task`` beside a results file."""
    return results_path.parent / f"samples_{task}_{results_stamp(results_path)}.jsonl"
