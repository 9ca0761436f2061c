"""Does ``lm-eval-ext recommend`` keep the conclusions it promises? The two-model campaign.

Input: the campaign's lm-eval folders in ``two_model_grid.py``'s layout (``RUNS/TASK/
MODEL_CONDITION``): the pilot task (the instrument's 12.5% membership, 62 natural units) in
every condition, batch 1 included, and the full 2,000-item instrument in every batch-64
condition. Steps:

1. per model, ``analyze`` of the pilot: the reference condition against the others;
2. ``lm-eval-ext recommend`` with both pilots (one protocol for both models): with every claim,
   and once per claim with that claim left out (leave-one-claim-out);
3. each claim's conclusions under the full protocol (the reference condition on 500 units)
   and under every option (condition x size): the option's own runs (the pilot runs at 62
   units, the full runs restricted to the frozen membership of 125 / 250 units, the full runs
   at 500); a claim ``METRIC=MARGIN`` is kept when the Gemma-minus-SmolLM2 verdict (sign and
   significance, cluster permutation) is the full protocol's and each model's value is within
   the margin of its full-protocol value;
4. per recommendation: is every claim kept (the left-out one above all), and the energy it
   saves (each option's measured J/item x its items, summed over the models, against the full
   protocol's measured joules). Every option's admissibility (from the pilot) is tabled
   against whether it kept every claim.

    python benchmarks/recommend_validation.py --runs /tmp/camp --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from _harness import command_line, write_json

from lm_eval_ext.analysis import analyze, write_outputs
from lm_eval_ext.analysis.claims import CHANGED, verdict
from lm_eval_ext.analysis.recommendation import INSTRUMENT_SIZES_UNITS
from lm_eval_ext.data.instrument import load_manifest

MODELS = {"smollm": "smollm2-135m-instruct", "gemma": "gemma3-270m"}
PILOT_TASK, FULL_TASK = "bbq_subset_12p5pct_loglik", "bbq_instrument_loglik"
#: natural units -> the frozen membership holding them
MEMBERSHIPS = {62: "12p5pct", 125: "25pct", 250: "50pct", 500: "instrument"}
SETTINGS = {"n_resamples": 2000, "mc_draws": 10, "seed": 0, "progress": False}


def folder(runs: Path, task: str, model: str, condition: str) -> Path:
    return runs / task / f"{MODELS[model]}_{condition}"


def results_json(run: Path) -> dict:
    [path] = run.rglob("results_*.json")
    return json.loads(path.read_text())


def joules_per_item(run: Path) -> float:
    data = results_json(run)
    return data["config"]["metering"]["energy_joules"] / data["n-samples"][
        next(iter(data["n-samples"]))]["effective"]


def restricted(run: Path, units: set[str], to: Path) -> Path:
    """A copy of ``run`` holding only the samples of ``units`` (the same lm-eval layout)."""
    shutil.copytree(run, to)
    for samples in to.rglob("samples_*.jsonl"):
        kept = [line for line in samples.read_text().splitlines()
                if json.loads(line)["doc"]["unit_id"] in units]
        samples.write_text("\n".join(kept) + "\n")
    [path] = to.rglob("results_*.json")
    data = json.loads(path.read_text())
    for counts in data["n-samples"].values():
        counts["effective"] = len(kept)
    path.write_text(json.dumps(data))
    return to


def option_runs(runs: Path, condition: str, units: int, scratch: Path
                ) -> tuple[dict[str, Path], float] | None:
    """Each model's run of ``condition`` on ``units`` natural units, and the J/item of the
    runs it comes from, summed over the models (None: not measured)."""
    task = PILOT_TASK if units == 62 else FULL_TASK
    source = {m: folder(runs, task, m, condition) for m in MODELS}
    if not all(p.exists() for p in source.values()):
        return None
    joules = sum(joules_per_item(p) for p in source.values())
    if units in (62, 500):
        return source, joules
    ids = set(load_manifest()["memberships"][MEMBERSHIPS[units]]["unit_ids"])
    return {m: restricted(p, ids, scratch / f"{m}_{condition}_{units}")
            for m, p in source.items()}, joules


def conclusions(runs: dict[str, Path], metrics: list[str]) -> dict[str, dict]:
    """Per metric: Gemma minus SmolLM2 (delta, interval, p, verdict) and each model's value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = analyze(runs["smollm"], [runs["gemma"]], labels=["smollm", "gemma"],
                         **SETTINGS)
    rows = result.deltas[result.deltas["subgroup_type"] == "all"].set_index("metric")
    out = {}
    for metric in metrics:
        row = rows.loc[metric]
        said = verdict(row["ci_low"], row["ci_high"], row["p_value"], 0.95)
        out[metric] = {"delta_pp": float(row["delta_pp"]), "ci_low": float(row["ci_low"]),
                       "ci_high": float(row["ci_high"]), "p_value": float(row["p_value"]),
                       "verdict": said if said != CHANGED else
                       ("gemma higher" if row["delta_pp"] > 0 else "smollm higher"),
                       "value_pp": {"smollm": 100 * float(row["reference"]),
                                    "gemma": 100 * float(row["value"])}}
    return out


def margin_verdict(low: float, high: float, margin: float) -> str:
    """Where the difference's interval lies against +-margin (what the margin can decide)."""
    if low > margin:
        return "gemma higher by more than the margin"
    if high < -margin:
        return "smollm higher by more than the margin"
    if -margin < low and high < margin:
        return "within the margin"
    return "undecided at the margin"


def kept(option: dict, full: dict, margin: float) -> dict:
    """Whether an option reaches the full protocol's conclusions on one claim.

    ``kept``: the same verdict (sign and significance) and each model's value within the
    margin of its full-protocol value; ``same_margin_verdict``: the interval on the same side
    of +-margin.
    """
    moved = {m: abs(option["value_pp"][m] - full["value_pp"][m]) for m in MODELS}
    within = all(v <= margin for v in moved.values())
    at_margin = [margin_verdict(c["ci_low"], c["ci_high"], margin) for c in (option, full)]
    return {"same_verdict": option["verdict"] == full["verdict"],
            "values_within_margin": within, "value_moved_pp": moved,
            "margin_verdict": at_margin[0], "same_margin_verdict": at_margin[0] == at_margin[1],
            "kept": option["verdict"] == full["verdict"] and within}


def recommend(pilots: dict[str, Path], claims: dict[str, float], out: Path) -> dict:
    """``lm-eval-ext recommend`` on both pilots: the card."""
    command = [sys.executable, "-m", "lm_eval_ext.cli.main", "recommend",
               *[f"{m}={p}" for m, p in pilots.items()], "--out", str(out)]
    for metric, margin in claims.items():
        command += ["--claim", f"{metric}={margin:g}"]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads((out / "card.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--reference", default="bf16_b64")
    parser.add_argument("--claims", nargs="+", default=["accuracy=5", "bias_s_dis=10",
                                                        "bias_s_amb=10"],
                        metavar="METRIC=MARGIN_PP")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    claims = {c.split("=")[0]: float(c.split("=")[1]) for c in args.claims}
    scratch = Path(tempfile.mkdtemp(prefix="recommend_validation_"))
    conditions = sorted({p.name.split("_", 1)[1] for p in (args.runs / PILOT_TASK).iterdir()}
                        - {args.reference})

    pilots = {}
    for model in MODELS:  # 1. the pilot analyses
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = analyze(folder(args.runs, PILOT_TASK, model, args.reference),
                             [folder(args.runs, PILOT_TASK, model, c) for c in conditions],
                             labels=[args.reference, *conditions], **SETTINGS)
        pilots[model] = scratch / f"pilot_{model}"
        write_outputs(result, pilots[model])

    full_runs, full_joules_per_item = option_runs(args.runs, args.reference, 500, scratch)
    full = conclusions(full_runs, list(claims))
    for metric, margin in claims.items():
        full[metric]["margin_verdict"] = margin_verdict(full[metric]["ci_low"],
                                                        full[metric]["ci_high"], margin)
    full_joules = full_joules_per_item * 2000
    options = []  # 3. every option's conclusions, measured
    for condition in [args.reference, *conditions]:
        for units in INSTRUMENT_SIZES_UNITS:
            found = option_runs(args.runs, condition, units, scratch)
            if found is None:
                continue
            said = conclusions(found[0], list(claims))
            joules = found[1] * units * 4
            options.append({"protocol": condition, "units": units, "items": units * 4,
                            "measured_joules": joules, "conclusions": said,
                            "claims": {m: kept(said[m], full[m], claims[m]) for m in claims}})
            print(condition, units, {m: options[-1]["claims"][m]["kept"] for m in claims},
                  flush=True)
    measured = {(o["protocol"], o["units"]): o for o in options}

    def check(card: dict, held_out: str | None) -> dict:
        chosen = card["recommended"]
        if chosen is None:
            return {"held_out": held_out, "recommended": None, "reasons": card["reasons"]}
        got = measured.get((chosen["protocol"], chosen["units"]))
        return {"held_out": held_out, "recommended": {k: chosen[k] for k in (
                    "protocol", "units", "items", "cost", "saved_share")},
                "predicted_risk": chosen["risk_of_change"], "mde_pp": chosen["mde_pp"],
                "measured": None if got is None else {
                    "claims_kept": {m: got["claims"][m]["kept"] for m in claims},
                    "same_margin_verdict": {m: got["claims"][m]["same_margin_verdict"]
                                            for m in claims},
                    "held_out_kept": None if held_out is None
                    else got["claims"][held_out]["kept"],
                    "joules": got["measured_joules"],
                    "saved_share": 1 - got["measured_joules"] / full_joules}}

    cards = {"all_claims": recommend(pilots, claims, scratch / "card_all")}
    checks = [check(cards["all_claims"], None)]
    for left_out in claims:  # 2 + 4. leave one claim out
        others = {m: v for m, v in claims.items() if m != left_out}
        cards[f"without_{left_out}"] = recommend(pilots, others, scratch / f"card_{left_out}")
        checks.append(check(cards[f"without_{left_out}"], left_out))
    admissible = {(o["candidate"], o["units"]): o["decidable"] and o["not_expected_to_move"]
                  for o in cards["all_claims"]["options"]}
    table = Counter(
        f"{'admissible' if admissible.get(key) else 'not_admissible'}_"
        f"{'kept' if all(c['kept'] for c in o['claims'].values()) else 'moved'}"
        for key, o in measured.items())
    write_json(args.out, {
        "command": command_line("recommend_validation.py", args), "claims_pp": claims,
        "reference": args.reference, "pilot_task": PILOT_TASK, "full_task": FULL_TASK,
        "full_protocol": {"conclusions": full, "measured_joules": full_joules},
        "recommendations": checks, "options": options, "admissible_vs_kept": dict(table),
        "cards": cards})
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
