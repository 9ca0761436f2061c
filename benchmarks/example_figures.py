"""The report's figures at paper scale, for docs/figures/ (synthetic answers: layout only).

Five runs of the 2,000-item instrument (a reference and four cheaper protocols with known
accuracy shifts and joules) and a grid of three models x three precisions with one flip go
through ``lm-eval-ext analyze``'s own pipeline; the figures it writes are copied to ``--out``.
The numbers in them are simulated, not measurements.

    LM_EVAL_EXT_DATA=../shared/data python benchmarks/example_figures.py --out docs/figures
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from _harness import write_json

TASK = "bbq_instrument_loglik"
HURT = "Religion"  # nf4's answers in this category are made worse
#: label -> (precision, batch, accuracy, joules): the cheaper protocols of the example
PROTOCOLS = {"bf16/bs1": ("bf16", 1, 0.60, 21_000.0), "bf16/bs64": ("bf16", 64, 0.60, 5_200.0),
             "int8/bs64": ("int8", 64, 0.59, 7_900.0), "nf4/bs64": ("nf4", 64, 0.56, 4_100.0),
             "fp8/bs64": ("fp8", 64, 0.60, 3_600.0)}
GRID = {("model-a", "bf16"): 0.66, ("model-b", "bf16"): 0.58, ("model-c", "bf16"): 0.50,
        ("model-a", "int8"): 0.66, ("model-b", "int8"): 0.57, ("model-c", "int8"): 0.51,
        ("model-a", "nf4"): 0.62, ("model-b", "nf4"): 0.49, ("model-c", "nf4"): 0.53}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--bootstrap", type=int, default=2_000)
    args = parser.parse_args()
    from lm_eval_ext.analysis import analyze, write_outputs
    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rng = np.random.default_rng(0)
    rows = load_membership("instrument").rows
    work = Path(tempfile.mkdtemp(prefix="example_figures_"))
    base = simulate_predictions(rows, 0.60, rng)
    paths = []
    for index, (label, (precision, batch, accuracy, joules)) in enumerate(PROTOCOLS.items()):
        preds = base if index == 0 else simulate_predictions(rows, accuracy, rng, base=base,
                                                              flip_rate=0.12)
        if precision == "nf4":  # one category hurt on purpose: a marked (significant) cell
            hurt = np.array([r["category"] == HURT for r in rows]) & (rng.random(len(rows)) < 0.5)
            labels = np.array([int(r["label"]) for r in rows])
            preds = np.where(hurt, (labels + 1) % 3, preds)
        write_run(work / label.replace("/", "_"), TASK, rows, preds, model="SmolLM2-135M",
                  precision=precision, batch_size=batch, energy_joules=joules,
                  inference_seconds=joules / 400)
        paths.append(work / label.replace("/", "_"))
    result = analyze(paths[0], paths[1:], n_resamples=args.bootstrap, mc_draws=200, seed=0,
                     progress=False, labels=list(PROTOCOLS))
    outputs = write_outputs(result, work / "report")

    labels = np.array([int(r["label"]) for r in rows[:400]])
    grid_paths = []
    for (model, precision), accuracy in GRID.items():
        correct = rng.permutation(len(labels)) < round(accuracy * len(labels))
        path = work / "grid" / f"{model}_{precision}"
        write_run(path, TASK, rows[:400], np.where(correct, labels, (labels + 1) % 3),
                  model=model, precision=precision, energy_joules=100.0, inference_seconds=1.0)
        grid_paths.append(path)
    grid = analyze(grid_paths[0], grid_paths[1:2], grid=grid_paths, n_resamples=200,
                   mc_draws=10, seed=0, progress=False)
    grid_outputs = write_outputs(grid, work / "grid_report")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in [*outputs.values(), grid_outputs["rank_flips"]]:
        if path.suffix == ".png":
            shutil.copy(path, out / path.name)
            copied.append(path.name)
    write_json(out / "example_figures.json", {
        "command": f"python benchmarks/example_figures.py --out {args.out} "
                   f"--bootstrap {args.bootstrap}",
        "note": "synthetic answers: the figures show the layout, not measurements",
        "nf4_hurt_category": HURT,
        "protocols": PROTOCOLS, "grid": {f"{m}/{p}": a for (m, p), a in GRID.items()},
        "figures": sorted(copied)})
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
