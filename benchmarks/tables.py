"""Measured tables rendered from result files, for the docs to include whole.

Each table is a function of committed files under ``benchmarks/results``, named
``FOLDER/NAME`` (FOLDER the study it reads). A page includes one between
``<!-- generated: FOLDER/NAME -->`` and ``<!-- /generated -->``; ``check_figures.py`` fails when
the block differs from what this script renders now (so a page's table cannot drift from its
source), and the figures inside such a block need no sources. No table is kept as a file.

    python benchmarks/tables.py            # paste each table into the pages that include it
    python benchmarks/tables.py --check    # exit 1 if a page's table is stale
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from _pages import END_GENERATED, GENERATED, documents, generated_blocks
from summarize_run import process_times

RESULTS = Path(__file__).resolve().parent / "results"
PUBLIC = "generation_public_2026-12-02"
#: (file, setting) of the side-by-side table, in its row order
SIDE_BY_SIDE = [("side_by_side_headline_tf517.json", "headline, 500 items, transformers 5.17"),
                ("side_by_side_headline_tf524.json", "headline, 500 items, transformers 5.24"),
                ("side_by_side_8b_b64_tf517.json", "8B, 64 items at batch 64, transformers 5.17"),
                ("side_by_side_8b_b64_tf524.json", "8B, 64 items at batch 64, transformers 5.24"),
                ("side_by_side_8b_b1_tf517.json", "8B, 6 items at batch 1, transformers 5.17"),
                ("side_by_side_8b_b1_tf524.json", "8B, 6 items at batch 1, transformers 5.24")]
GRAPHS = "generation_public_2026-12-03"
#: (file, setting) of the CUDA-graph decode against eager steps (2026-12-03), in row order
GRAPHS_AGAINST_EAGER = [
    ("graphs_headline.json", "headline, 500 items, transformers 5.17"),
    ("graphs_headline_tf524.json", "headline, 500 items, transformers 5.24"),
    ("graphs_8b_b64.json", "8B, 64 items at batch 64, transformers 5.17"),
    ("graphs_8b_b1.json", "8B, 6 items at batch 1, transformers 5.17")]

#: (file, setting) of the fast path against compiled static ``generate`` at 8B
#: (docs/measurements-public-generation.md)
STATIC_AGAINST_PUBLIC = [
    ("static_8b_b64.json", "8B, 64 items at batch 64"),
    ("static_8b_b64_500.json", "8B, 500 items at batch 64")]


def _load(results: Path, name: str, folder: str = PUBLIC) -> dict:
    return json.loads((results / folder / name).read_text(encoding="utf-8"))


def _medians(rows: list[dict]) -> str:
    """Median inference seconds, J/item and idle share of ``rows``, as table cells."""
    return " | ".join(f"{statistics.median(r[key] for r in rows):.2f}"
                      for key in ("inference_seconds", "j_per_item", "idle_share"))


def side_by_side(results: Path, files: list[tuple[str, str]] = SIDE_BY_SIDE,
                 folder: str = PUBLIC) -> str:
    """Per setting and variant: first run, the later runs' median time and J/item, same texts.

    The first run of a process (round 0's first variant) also carries its warm-up.
    """
    lines = ["| setting | variant | first run s | later runs: inference s | J/item | idle share "
             "| texts as `public`'s |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, setting in files:
        data = _load(results, name, folder)
        same = data["identical_to_public"]
        variants = list(dict.fromkeys(r["variant"] for r in data["runs"]))
        for variant in variants:
            runs = sorted((r for r in data["runs"] if r["variant"] == variant),
                          key=lambda r: r["round"])
            later = runs[1:] or runs
            lines.append(f"| {setting} | `{variant}` | {runs[0]['inference_seconds']:.2f} | "
                         f"{_medians(later)} | {same[variant]} |")
    return "\n".join(lines) + "\n"


def tokens_per_second(results: Path, files: list[tuple[str, str]] = STATIC_AGAINST_PUBLIC,
                      folder: str = GRAPHS) -> str:
    """Per setting and variant: the first run (its compile) apart, the later runs' tokens/s."""
    lines = ["| setting | variant | first run s | later runs: inference s | tokens/s "
             "| share of the fastest |", "|---|---|---:|---:|---:|---:|"]
    for name, setting in files:
        summary = _load(results, name, folder)["after_first_run"]
        fastest = max(v["later_tokens_per_second_median"] for v in summary.values())
        for variant, v in summary.items():
            rate = v["later_tokens_per_second_median"]
            lines.append(f"| {setting} | `{variant}` | {v['first_run_seconds']:.2f} | "
                         f"{v['later_seconds_median']:.2f} | {rate:.0f} | {rate / fastest:.2f} |")
    return "\n".join(lines) + "\n"


def vllm_beside_public(results: Path) -> str:
    """The headline task's rows of ``vllm_compare_public.json``: median over its rounds."""
    data = _load(results, "vllm_compare_public.json")
    agreement = data["agreement_vs_" + data["reference"]]
    lines = ["| path | inference s | J/item | idle share | texts as lm-eval's loop's |",
             "|---|---:|---:|---:|---:|"]
    labels = {"hf_standard": "lm-eval's loop, batch 512", "hf_fast": "hf-metered fast path",
              "vllm": "vllm-metered"}
    for condition, label in labels.items():
        rows = [r["per_task"]["bbq_subset_25pct"] for r in data["runs"]
                if r["condition"] == condition]
        lines.append(f"| {label} | {_medians(rows)} | "
                     f"{agreement[condition]['identical_texts']} of {agreement[condition]['items']} |")
    return "\n".join(lines) + "\n"


def cpu_headline(results: Path, folder: str = PUBLIC) -> str:
    """Each run of ``cpu_headline_ab.json``: wall and inference seconds, texts as the earlier tree's."""
    data = json.loads((results / folder / "cpu_headline_ab.json").read_text(encoding="utf-8"))
    lines = ["| tree | round | wall s | inference s | texts as the previous tree's |",
             "|---|---:|---:|---:|---:|"]
    for run in data["runs"]:
        lines.append(f"| `{run['side']}` ({data['commits'][run['side']][:7]}) | {run['round']} | "
                     f"{run['wall_seconds']:.1f} | {run['inference_seconds']:.1f} | "
                     f"{run['texts_identical_to_previous_round1']} of 500 |")
    return "\n".join(lines) + "\n"


STARTUP = "startup_2026-12-02"


def startup(results: Path) -> str:
    """Where the headline's wall time goes on the H200, beside stock ``lm_eval --model hf``."""
    folder = results / STARTUP
    runs = [json.loads((folder / f"headline_{n}.json").read_text(encoding="utf-8"))
            for n in ("cold", "again")]
    profiles = [json.loads((folder / f"{n}_profile.json").read_text(encoding="utf-8"))["parts"]
                for n in ("headline", "stock_hf")]
    stock = process_times((folder / "stock_hf_time.txt").read_text(encoding="utf-8"))[
        "process_wall_seconds"]
    lines = ["| seconds | hf-metered as typed, cold | again | stock `--model hf`, batch 32 |",
             "|---|---:|---:|---:|",
             f"| whole command (wall) | {runs[0]['process_wall_seconds']:.2f} | "
             f"{runs[1]['process_wall_seconds']:.2f} | {stock:.2f} |"]
    for label, key in (("inference (the metered windows)", "inference_seconds"),
                       ("model load", "load_seconds")):
        lines.append(f"| {label} | {runs[0]['metering'][key]:.2f} | "
                     f"{runs[1]['metering'][key]:.2f} | not metered |")
    lines.append(f"| idle-power baseline | {runs[0]['metering']['idle_power']['seconds']:.2f} | "
                 f"{runs[1]['metering']['idle_power']['seconds']:.2f} | none |")
    for label, key in (("compiling sources to bytecode (profiled run)", "compiling_sources"),
                       ("torch custom-op registration at import (profiled run)",
                        "custom_op_registration")):
        lines.append(f"| {label} | {profiles[0][key]['own_seconds']:.2f} | | "
                     f"{profiles[1][key]['own_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


STARTUP_AB = "startup_2026-12-03"
#: (file, what the A/B compares, {side: what it ran}) of the start-up A/B table, in row order;
#: the hf files' ``commits.current`` reads the device checkout's stale git HEAD (7d6eb86): the
#: package that ran was the wheel staged from a22b272
STARTUP_ABS = [
    ("headline_ab.json", "hf-metered headline, bytecode compiled",
     {"previous": "idle sampled first (3302d14)", "current": "idle sampled in the background (a22b272)"}),
    ("vllm_startup_ab.json", "vllm-metered headline, bytecode compiled",
     {"default": "vLLM's default engine (compiled, CUDA graphs)", "eager": "`enforce_eager=True`"}),
]


def startup_ab(results: Path) -> str:
    """Each run of the 2026-12-03 whole-command A/Bs: wall and inference seconds, same texts."""
    lines = ["| A/B | side | round | wall s | inference s | texts as the first side's round 1 |",
             "|---|---|---:|---:|---:|---:|"]
    for name, what, sides in STARTUP_ABS:
        data = json.loads((results / STARTUP_AB / name).read_text(encoding="utf-8"))
        for run in data["runs"]:
            same = next(v for k, v in run.items() if k.startswith("texts_identical_to_"))
            lines.append(f"| {what} | {sides[run['side']]} | {run['round']} | "
                         f"{run['wall_seconds']:.2f} | {run['inference_seconds']:.2f} | "
                         f"{same} of 500 |")
    return "\n".join(lines) + "\n"


RANK_FLIPS = "recommend_2026-12-03"
#: a rank-flip scenario's true gaps a - b over the conditions, by pattern (``g``: its gap)
RANK_FLIP_GAPS = {"tied": "0 in every condition", "constant_gap": "{g:+g} in every condition",
                  "boundary_null": "{g:+g}, 0, {g:+g}, 0, ...",
                  "alternating_flip": "{g:+g}, {m:+g}, {g:+g}, {m:+g}, ...",
                  "one_condition": "{g:+g}, 0, 0, 0, ..."}


def rank_flip_rates(results: Path, test: str, before: str) -> str:
    """Per pattern and grid: the % of grids ``test`` calls, [Clopper-Pearson 95%] (``before``'s)."""
    data = json.loads((results / RANK_FLIPS / "rank_flip_simulation.json")
                      .read_text(encoding="utf-8"))
    scenarios = {(r["pattern"], r["gap_pp"], r["conditions_correlated"], r["units"],
                  r["conditions"]): r for r in data["scenarios"]}
    grids = list(dict.fromkeys(key[3:] for key in scenarios))
    lines = ["| true gap a - b, pp | conditions | "
             + " | ".join(f"2 x {conditions}, {units} units" for units, conditions in grids)
             + " |", "|---|---|" + "---:|" * len(grids)]
    for pattern, gap, correlated in dict.fromkeys(key[:3] for key in scenarios):
        cells = []
        for grid in grids:
            row = scenarios[(pattern, gap, correlated, *grid)]
            low, high = row[f"{test}_ci95"]
            cells.append(f"{100 * row[f'{test}_rate']:.1f} [{100 * low:.1f}, {100 * high:.1f}] "
                         f"({100 * row[before]:.1f})")
        lines.append(f"| {RANK_FLIP_GAPS[pattern].format(g=gap, m=-gap)} | "
                     f"{'correlated' if correlated else 'independent'} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


#: the grid of ``recommend_simulation.py`` with the rule of 2026-12-05 (the 2026-12-03 grid,
#: of the rule before, is in git history: ``recommend_2026-12-03/errors.md@COMMIT``)
GRID = "recommend_2026-12-06"
#: the null kinds of ``recommend_simulation.py``, in the table's order, as the table names them
NULLS = {"independent": "independent changes, 3% churn", "independent_one_way":
         "independent, one-directional", "unit_clustered": "clustered in a fifth of the units",
         "few_units_two_items": "one-directional, 2 items in 10% of units",
         "all_or_nothing": "all-or-nothing, 5% of units",
         "all_or_nothing_churn": "all-or-nothing, 5% of units, 3% churn elsewhere",
         "partly_hidden": "partly hidden: 2% of units broken, 3 points one-way elsewhere",
         "partly_hidden_up": "the same, upwards",
         "partly_hidden_margin10": "partly hidden at margin 10: 4% broken, 6 points one-way",
         "between_models": "between models: one model shifted",
         "s_dis_categories": "S_DIS moved in 2 of 9 categories (margin 10)",
         "s_amb_categories": "S_AMB moved in 2 of 9 categories (margin 5)"}


def _percent(rate: dict) -> str:
    return f"{100 * rate['rate']:.1f}%"


def recommend_errors(results: Path, folder: str = GRID) -> str:
    """Per null and pilot size: the share of pilots whose recommended protocol is a shifted
    one, per number of candidates: ``recommend`` [its 95% interval's top] (the rule before);
    "not run" where the grid lacks the cell."""
    data = _load(results, "recommend_simulation.json", folder)
    cells = {(c["kind"], c["pilot_units"], c["candidates"]): c for c in data["cells"]}
    nulls = [c for c in data["cells"] if not c["kind"].startswith("power")]
    counts = sorted({c["candidates"] for c in nulls})
    sizes = sorted({c["pilot_units"] for c in nulls})
    lines = ["| null (each candidate shifts its claim by the margin) | pilot units | "
             + " | ".join(f"{n} candidate{'s' * (n > 1)}" for n in counts) + " |",
             "|---|---:|" + "---|" * len(counts)]
    for kind, label in NULLS.items():
        for units in sizes:
            row = []
            for n in counts:
                if (kind, units, n) not in cells:
                    row.append("not run")
                    continue
                rules = cells[kind, units, n]["rules"]
                new, old = rules["recommend"]["error"], rules["t_tost_before"]["error"]
                row.append(f"{_percent(new)} [{100 * new['ci95'][1]:.1f}] ({_percent(old)})")
            lines.append(f"| {label} | {units} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def recommend_power(results: Path, folder: str = GRID) -> str:
    """A truly equal candidate (the most expensive one, or the cheapest declared first; the
    others at the margin): the share of pilots that certify it and that recommend it,
    ``recommend`` (the rule before)."""
    data = _load(results, "recommend_simulation.json", folder)
    lines = ["| equal candidate's churn | pilot units | candidates | certified | recommended |",
             "|---:|---:|---:|---|---|"]
    power = sorted((c for c in data["cells"] if c["kind"].startswith("power")),
                   key=lambda c: (c["kind"], c["candidates"], c["churn_of_equal"],
                                  c["pilot_units"]))
    for cell in power:
        new, old = cell["rules"]["recommend"], cell["rules"]["t_tost_before"]
        declared = " (the cheapest, declared first)" if cell["kind"] == "power_declared" else ""
        lines.append(f"| {100 * cell['churn_of_equal']:g}% | {cell['pilot_units']} | "
                     f"{cell['candidates']}{declared} | {_percent(new['certified_equal'])} "
                     f"({_percent(old['certified_equal'])}) | {_percent(new['chose_equal'])} "
                     f"({_percent(old['chose_equal'])}) |")
    return "\n".join(lines) + "\n"


CERTIFICATES = "recommend_2026-12-05"


def certificate_errors(results: Path) -> str:
    """Per null cell of the 2026-12-05 run: pilots, the share whose recommended protocol is
    shifted [its 95% interval], the share with some shifted candidate certified, the rule
    before 2026-12-03 (Student's TOST)."""
    data = _load(results, "recommend_simulation.json", CERTIFICATES)
    lines = ["| null (each candidate shifts its claim by the margin) | pilot units | "
             "candidates | pilots | recommended a shifted protocol [95% CI] | certified one | "
             "Student's TOST |", "|---|---:|---:|---:|---|---|---|"]
    nulls = sorted((c for c in data["cells"] if not c["kind"].startswith("power")),
                   key=lambda c: (list(NULLS).index(c["kind"]), c["pilot_units"],
                                  c["candidates"]))
    for cell in nulls:
        new, old = cell["rules"]["recommend"], cell["rules"]["t_tost_before"]
        low, high = new["error"]["ci95"]
        lines.append(f"| {NULLS[cell['kind']]} | {cell['pilot_units']} | {cell['candidates']} "
                     f"| {cell['pilots']:,} | {_percent(new['error'])} [{100 * low:.1f}, "
                     f"{100 * high:.1f}] | {_percent(new['fwer'])} | {_percent(old['error'])} |")
    return "\n".join(lines) + "\n"


def certificate_power(results: Path) -> str:
    """Per power cell of the 2026-12-05 run: a truly equal candidate, the share of pilots that
    certify and that recommend it, beside the LP ceiling where one was computed."""
    data = _load(results, "recommend_simulation.json", CERTIFICATES)
    ceilings = {(c["pilot_units"], c["churn"]): c["ceiling_power"] for c in
                _load(results, "certificate_ceiling.json", CERTIFICATES)["ceilings"]}
    lines = ["| equal candidate | churn | pilot units | candidates | certified | recommended "
             "| ceiling (any valid test) |", "|---|---:|---:|---:|---|---|---|"]
    power = sorted((c for c in data["cells"] if c["kind"].startswith("power")),
                   key=lambda c: (c["kind"], c["candidates"], c["churn_of_equal"],
                                  c["pilot_units"]))
    for cell in power:
        new = cell["rules"]["recommend"]
        role = ("the cheapest, declared first" if cell["kind"] == "power_declared" else
                "the most expensive")
        ceiling = ceilings.get((cell["pilot_units"], cell["churn_of_equal"]))
        lines.append(f"| {role} | {100 * cell['churn_of_equal']:g}% | {cell['pilot_units']} | "
                     f"{cell['candidates']} | {_percent(new['certified_equal'])} | "
                     f"{_percent(new['chose_equal'])} | "
                     + (f"{100 * ceiling:.1f}% |" if ceiling and cell["candidates"] == 1
                        else "|"))
    return "\n".join(lines) + "\n"


#: table name (its study folder under benchmarks/results, then a name) -> its renderer
TABLES: dict[str, Callable[[Path], str]] = {
    f"{CERTIFICATES}/errors": certificate_errors,
    f"{CERTIFICATES}/power": certificate_power,
    f"{GRID}/errors": recommend_errors,
    f"{GRID}/power": recommend_power,
    f"{PUBLIC}/side_by_side": side_by_side,
    f"{PUBLIC}/vllm_beside_public": vllm_beside_public,
    f"{GRAPHS}/graphs_against_eager":
        lambda results: side_by_side(results, GRAPHS_AGAINST_EAGER, GRAPHS),
    f"{GRAPHS}/static_against_public": tokens_per_second,
    f"{PUBLIC}/cpu_headline_ab": cpu_headline,
    f"{STARTUP}/startup": startup,
    f"{STARTUP_AB}/ab": startup_ab,
    f"{STARTUP_AB}/cpu_headline_ab": lambda results: cpu_headline(results, STARTUP_AB),
    f"{RANK_FLIPS}/gap_varies":
        lambda results: rank_flip_rates(results, "gap_varies", "gap_varies_before_rate"),
    f"{RANK_FLIPS}/beyond_noise":
        lambda results: rank_flip_rates(results, "beyond_noise", "rule_before_rate"),
}


def stale(root: Path) -> list[str]:
    """``page:line: why`` for each included table that is not what its sources give now."""
    results, problems = root / "benchmarks" / "results", []
    for page in documents(root):
        for number, name, text in generated_blocks(page):
            where = f"{page.relative_to(root)}:{number}"
            if name not in TABLES:
                problems.append(f"{where}: no table {name} (tables: {', '.join(TABLES)})")
            elif TABLES[name](results) != text:
                problems.append(f"{where}: the table {name} differs from what its sources give "
                                "now (python benchmarks/tables.py)")
    return problems


def paste(root: Path) -> list[Path]:
    """Each generated block of the checked pages replaced by its table; the pages changed.

    A page with a block that has no end marker, or names no table, is left as it is
    (``check_figures.py`` names it).
    """
    changed, results = [], root / "benchmarks" / "results"
    for page in documents(root):
        text = page.read_text(encoding="utf-8")
        out, inside = [], False
        for line in text.splitlines(keepends=True):
            if inside and line.strip() == END_GENERATED:
                inside = False
            if inside:
                continue
            out.append(line)
            if (match := GENERATED.search(line)) is not None and match.group(1) in TABLES:
                out.append(TABLES[match.group(1)](results))
                inside = True
        if not inside and "".join(out) != text:
            page.write_text("".join(out), encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page's table is stale")
    args = parser.parse_args(argv)
    root = RESULTS.parents[1]
    if args.check:
        problems = stale(root)
        for problem in problems:
            print(f"tables: {problem}", file=sys.stderr)
        return 1 if problems else 0
    for page in paste(root):
        print(f"pasted into {page.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
