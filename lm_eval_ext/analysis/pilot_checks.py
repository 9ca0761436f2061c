"""``recommend``'s input checks, before any statistic: one line naming the input and the fix.

A card certifies what its inputs say, so input that would make a certificate meaningless is
refused here: a margin no protocol can exceed, the same pilot twice, pilots of different
designs, sizes beyond the instrument, analysis folders that ``analyze`` did not finish, and a
candidate of another model (a model swap is not a protocol change).
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.metrics import MetricSpec

#: the files of a finished ``analyze --out`` folder (report.md is written last)
ANALYSIS_FILES = ("runs.csv", "items.csv", "card_differences.csv", "report.md")
#: the SHA-256 of the tables ``analyze`` wrote (``sha256sum -c`` format)
CHECKSUMS = "tables.sha256"
#: the columns of runs.csv that make a pilot's design: pilots of one study share them
DESIGN_COLUMNS = {"tasks": "task", "scoring_path": "scoring path",
                  "membership_sha256": "item set (membership_sha256)"}


def check_complete(folder: Path) -> None:
    """``folder`` is a finished ``analyze --out`` folder (every file, report.md last)."""
    if folder.is_file():
        raise AnalysisInputError(f"recommend: {folder} is a file; pass the folder that holds it "
                                 f"({folder.parent}), the folder `lm-eval-ext analyze --out` "
                                 "wrote for the pilot")
    if not folder.is_dir():
        raise AnalysisInputError(f"recommend: pilot folder {folder} not found; pass the folder "
                                 "that `lm-eval-ext analyze --out` wrote for the pilot")
    missing = [name for name in ANALYSIS_FILES if not (folder / name).is_file()]
    if missing == ["report.md"]:
        raise AnalysisInputError(f"recommend: {folder} is an unfinished analysis (no report.md: "
                                 "`analyze` stopped while writing it, e.g. on a full disk); "
                                 f"delete {folder}, then rerun `lm-eval-ext analyze` with "
                                 f"--out {folder}")
    if missing:
        raise AnalysisInputError(f"recommend: {folder} has no {missing[0]}; pass the folder that "
                                 "`lm-eval-ext analyze --out` wrote for the pilot (analyse it "
                                 "again with this version if it is an old one)")


def metric_span_pp(spec: MetricSpec) -> float | None:
    """The widest possible shift of a metric in points, or None where its spec declares no span.

    The spec's ``span`` times its ``scale``: a share (a mean of 0/1 outcomes) moves at most
    100 points; a BBQ bias score lies in [-1, 1], so it moves at most 200.
    """
    if spec.span is None:
        return None
    low, high = spec.span
    return (high - low) * spec.scale


def check_margin(text: str, spec: MetricSpec, margin_pp: float, n_models: int) -> None:
    """A finite margin that the claim's contrast can exceed (``n_models`` 2: a difference)."""
    if not math.isfinite(margin_pp):
        raise AnalysisInputError(f"recommend: claim {text!r}: the margin must be a finite "
                                 "number of points (e.g. --claim accuracy=2)")
    span = metric_span_pp(spec)
    if span is not None and margin_pp >= span * n_models:
        what = ("a difference of two models' " if n_models > 1 else "") + spec.name
        raise AnalysisInputError(
            f"recommend: claim {text!r}: {what} cannot move by {margin_pp:g} points or more "
            f"(it spans {span * n_models:g}), so every protocol would keep it; give the "
            f"largest shift you could tolerate, below {span * n_models:g} (e.g. "
            f"--claim {text.partition('=')[0]}=2)")


def check_distinct(fingerprints: Mapping[str, set[str]]) -> None:
    """No run (by its files' SHA-256) in two pilots: one pilot given twice is not two models."""
    names = list(fingerprints)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            if fingerprints[first] & fingerprints[second]:
                raise AnalysisInputError(
                    f"recommend: pilots {first} and {second} hold the same run (identical "
                    "results and samples files): one pilot given twice would count its costs "
                    "twice and its model against itself; give each model's own pilot once")


def check_same_design(designs: Mapping[str, Mapping[str, str]]) -> None:
    """Every pilot evaluates the same tasks, scoring path and items (one protocol for all)."""
    first, *others = designs
    for name in others:
        for column, what in DESIGN_COLUMNS.items():
            mine, theirs = designs[name].get(column, ""), designs[first].get(column, "")
            if mine != theirs:
                raise AnalysisInputError(
                    f"recommend: pilots {first} and {name} differ in {what} ({theirs or 'none'} "
                    f"against {mine or 'none'}); a recommendation covers pilots of one design: "
                    "run every model's pilot on the same task, scoring path and items, or "
                    "recommend for each design separately")


def check_sizes(sizes: Sequence[int], instrument_units: int, items_per_unit: int) -> None:
    """Subset sizes between 1 natural unit and the whole instrument."""
    beyond = [size for size in sizes if size > instrument_units]
    if beyond:
        raise AnalysisInputError(
            f"recommend: --sizes {beyond[0]} is beyond the instrument, which has "
            f"{instrument_units} natural units ({instrument_units * items_per_unit} items); "
            f"give sizes up to {instrument_units} (e.g. --sizes 62,125,250,{instrument_units})")


#: the columns ``recommend`` reads from each table ``analyze`` writes into a pilot folder
PILOT_COLUMNS = {"runs.csv": ("run", "is_reference", "model", "n_items", "energy_joules",
                              "inference_seconds"),
                 "items.csv": ("run", "item_key"),
                 "card_differences.csv": ("run", "factors", "differences")}


def read_table(folder: Path, name: str) -> pd.DataFrame:
    """``analyze``'s table ``name`` of a pilot folder; an empty, cut or damaged one is one line."""
    path = folder / name
    fix = (f"`lm-eval-ext analyze` wrote it: rerun `lm-eval-ext analyze` with the pilot's "
           f"--reference and --runs and --out {folder} --overwrite")
    data = path.read_bytes()  # read once: the table, and whether its last line ended
    cut = not data.endswith(b"\n")
    try:
        table = pd.read_csv(io.BytesIO(data), low_memory=False)
    except (UnicodeDecodeError, pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        problem = ("is empty" if isinstance(exc, pd.errors.EmptyDataError) else
                   f"is damaged ({str(exc).splitlines()[0]})")
        raise AnalysisInputError(f"recommend: {path} {problem}; {fix}") from None
    missing = [c for c in PILOT_COLUMNS.get(name, ()) if c not in table.columns]
    problem = ("was cut (its last line has no end)" if cut else "holds no rows" if table.empty
               else f"lacks the column(s) {', '.join(missing)}" if missing else None)
    if problem:
        raise AnalysisInputError(f"recommend: {path} {problem}; {fix}")
    recorded = _recorded_checksums(folder).get(name)
    if recorded is None:  # a certificate rests on the tables analyze wrote, unedited
        where = (f"{folder / CHECKSUMS} does not list {name}" if (folder / CHECKSUMS).is_file()
                 else f"{folder / CHECKSUMS} is missing")
        raise AnalysisInputError(f"recommend: {where} (the SHA-256 `analyze` writes beside its "
                                 "tables), so an edit of the table could not be told; " + fix)
    if hashlib.sha256(data).hexdigest() != recorded:
        raise AnalysisInputError(f"recommend: {path} is not the table `analyze` wrote (its "
                                 f"SHA-256 differs from the one in {CHECKSUMS}): it was edited; "
                                 f"{fix}")
    return table


def _recorded_checksums(folder: Path) -> dict[str, str]:
    """File name -> SHA-256 from ``folder``'s checksums (none: removed, or an older analysis)."""
    path = folder / CHECKSUMS
    if not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return {name: digest for digest, _, name in (line.partition("  ") for line in lines)}


def check_one_model(runs: pd.DataFrame, reference: str, folder: Path) -> None:
    """Every run of a pilot is the reference's own model: a protocol change, not a model swap."""
    models = dict(zip(runs["run"].astype(str), runs["model"].astype(str), strict=True))
    for run, model in models.items():
        if model != models[reference]:
            raise AnalysisInputError(
                f"recommend: in {folder} run {run} is model {model}, the reference {reference} "
                f"model {models[reference]}; a card certifies a protocol change of the "
                "reference's own model on the same items, not another model: analyse each "
                "model's protocols against its own reference and pass one pilot per model "
                "(recommend A=PILOT_A B=PILOT_B), or compare the models with `lm-eval-ext "
                "analyze` alone")


def check_same_items(folder: Path, reference: str) -> None:
    """No run of a pilot differs from the reference in its items (task, item set or count).

    The pilot pairs runs on their shared items, where a change of items alone changes no
    answer (the same protocol answers the same item the same way), so its deltas cannot vouch
    for another item set (``card_differences.csv``, as ``analyze`` wrote it: an older analysis,
    whose checksums do not list it, is refused with the rerun that records them).
    """
    table = read_table(folder, "card_differences.csv")
    for row in table.itertuples(index=False):
        factors = str(row.factors).split(",")
        if "items" in factors:
            raise AnalysisInputError(
                f"recommend: in {folder} run {row.run} differs from the reference {reference} "
                f"in its items ({row.differences}); a card certifies a protocol change on the "
                "same items, and the pilot's deltas on the shared items cannot vouch for "
                "another item set: analyse runs of one task and --limit, and let recommend "
                "choose a smaller subset of the reference itself (--sizes)")
        if "task" in factors:  # the same items under another task (its scoring path's twin)
            raise AnalysisInputError(
                f"recommend: in {folder} run {row.run} differs from the reference {reference} "
                f"in its task ({row.differences}); a card certifies a protocol change of one "
                "task: analyse runs of the reference's task, or compare the tasks with "
                "`lm-eval-ext analyze` alone")
