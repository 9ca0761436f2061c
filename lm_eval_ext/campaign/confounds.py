"""Comparisons of a campaign whose conditions differ in more than one setting, or in none.

The analysis names such a change in its report ("changes 2 factors at once"); a dry run says
it while the campaign file can still be changed.
"""

from __future__ import annotations

from typing import Any

from lm_eval_ext.campaign.spec import CampaignSpec, Cell

#: options that decide the items (a different item set is compared on shared items by design)
_ITEM_OPTIONS = ("limit", "samples")


def cell_settings(cell: Cell) -> dict[str, Any]:
    """What a cell runs with, apart from its items: model args (parsed) and lm-eval options."""
    options = {k: v for k, v in cell.options.items() if k not in _ITEM_OPTIONS}
    return {**options, **cell.engine_args}


def differing_settings(reference: Cell, other: Cell) -> list[str]:
    """The settings (model args and options) in which ``other`` differs from ``reference``."""
    mine, theirs = cell_settings(reference), cell_settings(other)
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def confounded_comparison_lines(spec: CampaignSpec) -> list[str]:
    """One line per compared condition that changes more than one setting at once."""
    lines = []
    for model in spec.model_labels:
        for comparison in spec.comparisons:
            for ref, runs in spec.compared_cells(model, comparison):
                for run in runs:
                    changed = differing_settings(ref, run)
                    if not changed and run.task == ref.task and run.items() == ref.items():
                        lines.append(
                            f"note: compare.{comparison.name} ({model}, {ref.task}): "
                            f"{run.condition} has {ref.condition}'s settings and items: a "
                            "repeat, whose deltas and ratios measure run-to-run variation, "
                            "not a protocol change (the report says so)")
                    if len(changed) > 1:
                        lines.append(
                            f"note: compare.{comparison.name} ({model}, {ref.task}): "
                            f"{run.condition} differs from {ref.condition} in {len(changed)} "
                            f"settings at once ({', '.join(changed)}), so its deltas mix "
                            "them (the report says so); to measure one change, let the two "
                            "conditions differ in one setting")
    return lines
