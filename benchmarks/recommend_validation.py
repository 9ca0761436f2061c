"""Does ``recommend``'s choice hold on units it never saw? Held-out validation on real runs.

Input: the two-model H200 runs of the 2,000-item BBQ instrument (log-likelihood) in
``two_model_grid.py``'s layout (``RUNS/bbq_instrument_loglik/MODEL_CONDITION``), SmolLM2-135M
and Gemma-3-270M in ``--conditions`` (the first is the reference). Per pilot membership (the
instrument's five disjoint-draw 12.5% memberships, 62 natural units each):

1. the pilot: every run restricted to the membership's units; the held-out set: the other 438
   units of the instrument (disjoint from the pilot);
2. for every claim, one at a time (each metric x each model's value and the Gemma-minus-SmolLM2
   difference x each margin), ``recommend`` through the package's own functions (the joint
   bootstrap, the Holm-certified TOST, the cheapest decidable option; costs: each run's
   measured J/item summed over the models);
3. the chosen protocol judged on the held-out units by the same estimator: its shift of the
   claim's contrast against the reference protocol, the shift's 90% interval, and whether the
   shift lies beyond the margin (a wrong certificate, as far as held-out data can tell).

    python benchmarks/recommend_validation.py --runs /tmp/C --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from _harness import command_line, write_json
from scipy import stats

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS
from lm_eval_ext.analysis.recommendation import INSTRUMENT_SIZES_UNITS, ITEMS_PER_UNIT
from lm_eval_ext.analysis.stats.pilot_contrasts import claim_estimates
from lm_eval_ext.analysis.stats.recommend import Candidate, Claim, recommend
from lm_eval_ext.data.instrument import load_manifest

MODELS = {"smollm": "smollm2-135m-instruct", "gemma": "gemma3-270m"}
TASK = "bbq_instrument_loglik"
SPECS = {s.name: s for s in (ACCURACY, BIAS_S_DIS, BIAS_S_AMB)}
PILOTS = ("12p5pct", "12p5pct_r2", "12p5pct_r3", "12p5pct_r4", "12p5pct_r5")
CONTRASTS = (("smollm",), ("gemma",), ("gemma", "smollm"))


def read_runs(runs: Path, conditions: list[str]) -> tuple[dict, dict]:
    """Per model and condition the 2,000 items (one order), and each condition's J/item."""
    frames, joules = {}, {}
    for model, name in MODELS.items():
        folders = [runs / TASK / f"{name}_{c}" for c in conditions]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = analyze(folders[0], folders[1:], labels=conditions, n_resamples=100,
                             mc_draws=10, seed=0, progress=False)
        frames[model] = {c: result.items[result.items["run"] == c].sort_values("item_key")
                         .reset_index(drop=True) for c in conditions}
        table = result.runs.set_index("run")
        joules[model] = (table["energy_joules"] / table["n_items"]).to_dict()
    return frames, joules


def restrict(frames: dict, units: set[str]) -> dict:
    return {m: {c: f[f["unit_id"].astype(str).isin(units)].reset_index(drop=True)
                for c, f in runs.items()} for m, runs in frames.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--conditions", nargs="+", default=["bf16_b64", "int8_b64", "nf4_b64"])
    parser.add_argument("--margins", type=float, nargs="+", default=[2.0, 3.0, 5.0, 10.0])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    reference = args.conditions[0]
    frames, joules = read_runs(args.runs, args.conditions)
    cost = {c: sum(joules[m][c] for m in MODELS) for c in args.conditions}
    memberships = load_manifest()["memberships"]
    everything = set(memberships["instrument"]["unit_ids"])
    claims = [Claim(metric, margin, contrast) for metric in SPECS for contrast in CONTRASTS
              for margin in args.margins]
    z90 = stats.norm.isf(args.alpha)
    rows = []
    for k, name in enumerate(PILOTS):
        pilot_units = set(memberships[name]["unit_ids"])
        pilot, held = restrict(frames, pilot_units), restrict(frames, everything - pilot_units)
        estimated = claim_estimates(pilot, reference, claims, SPECS, args.bootstrap, k)
        judged = claim_estimates(held, reference, claims, SPECS, args.bootstrap, 100 + k)
        for claim in claims:
            candidates = [Candidate(c, cost[c], {claim.name: estimated[c][claim.name]})
                          for c in args.conditions]
            rec = recommend(candidates, [claim], INSTRUMENT_SIZES_UNITS, ITEMS_PER_UNIT,
                            reference=reference, alpha=args.alpha)
            chosen = rec.chosen.candidate if rec.chosen else None
            row = {"pilot": name, "claim": claim.name, "margin_pp": claim.margin_pp,
                   "chosen": chosen, "units": rec.chosen.units if rec.chosen else None,
                   "certified": sorted(n for n, c in rec.certificates.items() if c.certified),
                   "pilot_p_adjusted": {n: c.pvalue_adjusted for n, c in rec.certificates.items()}}
            if chosen is not None and chosen != reference:
                held_out = judged[chosen][claim.name]
                row["held_out"] = {
                    "shift_pp": held_out.shift_pp, "se_pp": held_out.shift_se_pp,
                    "ci90": [held_out.shift_pp - z90 * held_out.shift_se_pp,
                             held_out.shift_pp + z90 * held_out.shift_se_pp],
                    "beyond_margin": abs(held_out.shift_pp) >= claim.margin_pp}
            rows.append(row)
        print(name, sum(r["chosen"] not in (None, reference) for r in rows[-len(claims):]),
              "of", len(claims), "claims chose a cheaper protocol", flush=True)
    table = pd.DataFrame(rows)
    cheaper = table[table["chosen"].notna() & (table["chosen"] != reference)]
    beyond = int(sum(r["beyond_margin"] for r in cheaper["held_out"]))
    low, high = (stats.binomtest(beyond, len(cheaper)).proportion_ci(0.95) if len(cheaper)
                 else (np.nan, np.nan))
    contrasts = [c for c in claims if c.margin_pp == args.margins[0]]
    whole = claim_estimates(frames, reference, contrasts, SPECS, args.bootstrap, 7)
    whole_shift = {c.name: {
        cond: {"shift_pp": whole[cond][c.name].shift_pp, "se_pp": whole[cond][c.name].shift_se_pp}
        for cond in args.conditions[1:]} for c in contrasts}
    write_json(args.out, {
        "command": command_line("recommend_validation.py", args), "reference": reference,
        "conditions": args.conditions, "alpha": args.alpha, "task": TASK,
        "joules_per_item_both_models": cost,
        "summary": {"recommendations": len(table), "chose_cheaper": len(cheaper),
                    "chose_reference_subset": int((table["chosen"] == reference).sum()),
                    "nothing_recommended": int(table["chosen"].isna().sum()),
                    "cheaper_beyond_margin_on_held_out": beyond,
                    "cheaper_beyond_margin_share": beyond / len(cheaper) if len(cheaper)
                    else None, "cheaper_beyond_margin_ci95": [low, high],
                    "chosen_counts": json.loads(table["chosen"].fillna("none").value_counts()
                                                .to_json())},
        "whole_instrument_shift": whole_shift, "recommendations": rows})


if __name__ == "__main__":
    main()
