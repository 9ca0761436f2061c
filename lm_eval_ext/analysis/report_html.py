"""The analysis report as HTML (``report.html``): conclusions and the result tables."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from lm_eval_ext.analysis.report_markdown import conclusion_lines


def report_html(result, figure_paths: list[Path], out: Path) -> str:
    """``report.html`` of an :class:`AnalysisResult`, its figures linked relative to ``out``."""
    def table(frame: pd.DataFrame) -> str:
        return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="")

    body = [f"<h1>Did the conclusion change?</h1><p>Reference: <b>{html.escape(result.reference_id)}"
            f"</b>; {result.n_items} paired items in {result.n_clusters} natural units.</p>",
            "<h2>Conclusions</h2><ul>"]
    body += [f"<li>{html.escape(line[2:].replace('**', ''))}</li>"
             for line in conclusion_lines(result.deltas, result.settings["level"],
                                          result.settings["cluster"])]
    body += ["</ul><h2>Cost</h2>", table(result.runs.drop(columns=["task_settings"],
                                                        errors="ignore")),
             "<h2>Paired comparisons</h2>", table(result.comparisons),
             "<h2>Deltas</h2>", table(result.deltas),
             "<h2>Membership sensitivity</h2>", table(result.membership_summary)]
    if result.rank_flips is not None:
        body += ["<h2>Rank flips</h2>", table(result.rank_flips), table(result.rankings),
                 table(result.variance_shares)]
    body += [f'<h3>{p.stem}</h3><img src="{p.relative_to(out)}">' for p in figure_paths]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>lm-eval-ext analysis"
            "</title><style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
            "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
            "padding:2px 6px}</style></head><body>" + "".join(body) + "</body></html>")
