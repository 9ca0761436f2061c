"""Write the analysis outputs into a folder: CSVs, figures, ``report.md`` and ``report.html``.

This module checks the folder, writes the tables and figures and swaps the folder in whole; the
reports themselves are rendered by :mod:`~lm_eval_ext.analysis.report_markdown` and
:mod:`~lm_eval_ext.analysis.report_html`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lm_eval_ext.analysis import figures
from lm_eval_ext.analysis.comparisons import preregistration_cards
from lm_eval_ext.analysis.pilot_checks import CHECKSUMS
from lm_eval_ext.analysis.report_html import report_html
from lm_eval_ext.analysis.report_markdown import report_markdown
from lm_eval_ext.data.store import sha256_of


def check_output_folder(out: Path, overwrite: bool = False, marker: str = "report.md",
                        outputs: frozenset[str] | None = None, command: str = "analyze") -> bool:
    """Check ``--out`` before any work; True when it holds an earlier analysis to replace.

    Accepted: a new or empty folder, or (with ``overwrite``) one holding an earlier analysis
    (its ``marker`` file, the report written last) and nothing else: only the paths in
    ``outputs`` (what ``command`` writes, relative; default: analyze's
    :data:`ANALYSIS_OUTPUTS`), since the folder is replaced whole.
    A file, a folder holding anything else, or an earlier analysis without ``overwrite`` is
    an error. Nothing is removed here, so a failing analysis loses nothing.
    """
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.files import probe_writable

    if out.exists() and not out.is_dir():
        raise AnalysisInputError(f"--out {out} is a file; pass a folder for the report")
    probe_writable(out)
    if not out.is_dir() or not any(out.iterdir()):
        return False
    if not (out / marker).is_file():
        raise AnalysisInputError(f"--out {out} is not empty and holds no earlier analysis; "
                                 "choose a new folder")
    if not overwrite:
        raise AnalysisInputError(f"--out {out} holds an earlier analysis; choose a new folder or "
                                 "pass --overwrite to replace it")
    cards = sorted(str(path.relative_to(out)) for name in RECOMMENDATION_FILES
                   for path in out.rglob(name) if path.is_file())
    if cards:  # a record (also in a folder of its own): replacing the folder would delete it
        raise AnalysisInputError(
            f"--out {out} also holds a recommendation card ({', '.join(cards)}, written by "
            "`recommend --out`), which --overwrite would delete with the folder: move the card "
            "out first, or analyse into a new --out")
    others = foreign_paths(out, ANALYSIS_OUTPUTS if outputs is None else outputs)
    if others:  # the user's notes, a plot of their own: replacing the folder deletes them
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise AnalysisInputError(
            f"--out {out} also holds {shown}, which {command} did not write and --overwrite "
            f"would delete with the folder: move {'it' if len(others) == 1 else 'them'} out "
            "first, or analyse into a new --out")
    return True


def foreign_paths(out: Path, outputs: frozenset[str]) -> list[str]:
    """What under ``out`` is none of ``outputs``: files, and folders holding none of them."""
    found: list[str] = []
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if any(relative.startswith(f"{f.rstrip('/')}/") for f in found if f.endswith("/")):
            continue  # inside a folder named already
        if path.is_dir() and not path.is_symlink():
            if not any(o.startswith(f"{relative}/") for o in outputs):
                found.append(f"{relative}/")
        elif relative not in outputs:
            found.append(relative)
    return found


#: what ``recommend --out`` writes (a record, kept by recommend itself unless --overwrite)
RECOMMENDATION_FILES = ("card.json", "card.md")
#: the tables (``<name>.csv``) and figures (``figures/<name>.png``) analyze may write
TABLES = ("items", "deltas", "runs", "comparisons", "membership", "membership_frozen", "claims",
          "clustering", "card_differences", "rank_flips", "rankings", "variance_shares",
          "grid_orderings")
HEATMAPS = ("category", "demographic_group", "context_polarity")  # delta heatmaps by subgroup
FIGURES = ("quality_vs_cost", "runtime_vs_energy_savings", "rank_flips", "subset_size",
           *(f"heatmap_{t}" for t in HEATMAPS))
#: every path an analysis folder may hold (relative): anything else is the user's
ANALYSIS_OUTPUTS = frozenset({
    *(f"{name}.csv" for name in TABLES), *(f"figures/{name}.png" for name in FIGURES),
    "cards.json", CHECKSUMS, "preregistration.md", "report.md", "report.html"})


def analyze_to_folder(reference, runs, out: str | Path, *, overwrite: bool = False,
                      **settings) -> tuple[Any, dict[str, Path]]:
    """``lm-eval-ext analyze`` as a function: analyse, then write every output into ``out``.

    ``out`` is checked before the work (a new or empty folder, or an earlier analysis with
    ``overwrite``); the outputs are written beside it and swapped in whole
    (:func:`~lm_eval_ext.files.folder_written_whole`), so a failing analysis, a full disk or a
    killed process leaves the earlier folder as it was, never a mix. ``settings`` are
    :func:`~lm_eval_ext.analysis.analyze`'s. Returns the result and the written paths.
    """
    from lm_eval_ext.analysis.pipeline import analyze

    out = Path(out)
    earlier = check_output_folder(out, overwrite=overwrite)
    result = analyze(reference, runs, **settings)
    return result, write_folder(out, overwrite, lambda staging: write_outputs(result, staging),
                                earlier=earlier)


def write_folder(out: Path, overwrite: bool, write: Callable[[Path], dict[str, Path]],
                 marker: str = "report.md", earlier: bool = False,
                 outputs: frozenset[str] | None = None,
                 command: str = "analyze") -> dict[str, Path]:
    """``write(folder)`` into a staging folder swapped in as ``out`` whole; paths under ``out``.

    ``out`` is checked again (:func:`check_output_folder`, with ``marker``, ``outputs`` and
    ``command``) in case it changed during the work; ``earlier``: whether the first check found
    an earlier analysis (if not, one there now is another process's, written meanwhile).
    """
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.files import folder_written_whole

    try:
        check_output_folder(out, overwrite=overwrite, marker=marker, outputs=outputs,
                            command=command)
    except AnalysisInputError:
        if not earlier and out.is_dir() and any(out.iterdir()):
            raise AnalysisInputError(
                f"--out {out} was written by another process while this one worked (it was "
                "new or empty when this command started); nothing of this run was written: run "
                "it again with a new --out") from None
        raise
    with folder_written_whole(out, replace=overwrite) as staging:  # another writer's: kept
        paths = write(staging)
    return {name: out / path.relative_to(staging) for name, path in paths.items()}


def write_outputs(result, out: Path) -> dict[str, Path]:
    """Write every table and figure of an :class:`AnalysisResult` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    paths: dict[str, Path] = {}
    tables = {"items": result.items, "deltas": result.deltas, "runs": result.runs,
              "comparisons": result.comparisons, "membership": result.membership_summary,
              "membership_frozen": result.membership_frozen}
    if result.claims is not None:
        tables["claims"] = result.claims
    if result.clustering is not None:
        tables["clustering"] = result.clustering
    if result.card_differences is not None:
        tables["card_differences"] = result.card_differences
        paths["cards"] = out / "cards.json"
        paths["cards"].write_text(json.dumps(result.cards, indent=2, sort_keys=True, default=str),
                                  encoding="utf-8")
    if result.rank_flips is not None:
        tables.update(rank_flips=result.rank_flips, rankings=result.rankings,
                      variance_shares=result.variance_shares,
                      grid_orderings=result.grid_orderings)
    for name, table in tables.items():
        paths[name] = out / f"{name}.csv"
        table.to_csv(paths[name], index=False)
    paths["checksums"] = out / CHECKSUMS
    paths["checksums"].write_text("".join(  # sha256sum's format: `sha256sum -c` checks them
        f"{sha256_of(paths[name])}  {name}.csv\n"
        for name in ("runs", "items", "card_differences") if name in paths), encoding="utf-8")
    overall = result.deltas[result.deltas["subgroup_type"] == "all"].drop_duplicates(
        ["run", "metric"])
    draw = {"quality_vs_cost": lambda: figures.quality_vs_cost(result.runs, overall),
            "runtime_vs_energy_savings": lambda: figures.savings(result.runs),
            "rank_flips": lambda: figures.rank_flips(result.grid_orderings),
            "subset_size": lambda: figures.subset_size(
                result.membership_summary, result.membership_draws, result.membership_frozen),
            **{f"heatmap_{t}": functools.partial(figures.delta_heatmap, result.deltas, t)
               for t in HEATMAPS}}
    made = [figures.save(draw[name](), fig_dir / f"{name}.png") for name in FIGURES]
    paths.update({p.stem: p for p in made if p is not None})
    paths["preregistration"] = out / "preregistration.md"
    paths["preregistration"].write_text("# Pre-registration cards\n\n"
                                        + preregistration_cards(result.comparisons))
    report = report_markdown(result, [p for p in made if p is not None], out)
    paths["report_md"] = out / "report.md"
    paths["report_md"].write_text(report, encoding="utf-8")
    paths["report_html"] = out / "report.html"
    paths["report_html"].write_text(report_html(result, [p for p in made if p], out),
                                    encoding="utf-8")
    return paths
