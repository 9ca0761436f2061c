"""Operating characteristics of `lm-eval-ext sequential`'s design, by simulation (JSON).

The frozen instrument's looks (62, 125, 187, 250, 375, 500 natural units of 4 items), accuracy,
alpha 0.05, beta 0.2, margin 2 pp; 2,000 clustered paired datasets per true effect (the data
model of ``lm_eval_ext.analysis.stats.sequential_known_truth.simulate_paired_units``): false "changed" at no
difference, false "equivalent" at a true difference of +-margin (where TOST bounds it by alpha),
power and expected items at the full instrument's MDE; each with the realised effect.

    python benchmarks/sequential_simulation.py --out benchmarks/results/sequential_simulation_2026-12-01.json
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

import numpy as np
import pandas as pd
from _harness import write_json

from lm_eval_ext.analysis import ACCURACY, SequentialPlan, final_mde, linearised_delta
from lm_eval_ext.analysis.stats.sequential_known_truth import simulate, simulate_paired_units

UNITS = (62, 125, 187, 250, 375, 500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--datasets", type=int, default=2000)
    args = parser.parse_args()
    plan = SequentialPlan("accuracy", 0.02, tuple(u / 500 for u in UNITS))
    ref, cand = simulate_paired_units(500, 0.0, np.random.default_rng(13))
    _, se_full = linearised_delta(ACCURACY, pd.DataFrame({"correct": ref}),
                                  pd.DataFrame({"correct": cand}), np.repeat(np.arange(500), 4))
    mde = final_mde(plan, se_full)
    effects = {"zero": 0.0, "plus_margin": plan.margin, "minus_margin": -plan.margin, "mde": mde}
    runs = {name: asdict(simulate(plan, effect, 500, args.datasets, seed=i))
            for i, (name, effect) in enumerate(effects.items())}
    write_json(args.out, {"plan": asdict(plan), "alpha_per_look": plan.look_alphas(),
                          "z_boundary_per_look": plan.boundaries(),
                          "units_per_look": UNITS, "mde_full_instrument": mde,
                          "results": runs, "command": f"python benchmarks/sequential_simulation.py "
                          f"--out {args.out}"})


if __name__ == "__main__":
    main()
