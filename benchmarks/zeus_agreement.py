"""P4: agreement of our energy windows with Zeus's ``ZeusMonitor`` over the same windows (GPU).

Each window runs the same prebuilt log-likelihood requests through hf-metered. Three readings
cover every window: Zeus (``begin_window``/``end_window``), our ``EnergyMeter`` window, and the
hf-metered ledger's own per-task window inside the call. The nesting order of the Zeus and
EnergyMeter edges alternates between windows so that neither is systematically the outer one.
Goal: within 2%.

    python benchmarks/zeus_agreement.py --out benchmarks/results/p4_zeus_h200.json
"""

from __future__ import annotations

import argparse

from _harness import build_requests, environment, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="bbq_instrument_loglik")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from zeus.monitor import ZeusMonitor

    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.metering import EnergyMeter, NvmlSource

    lm = HFMeteredLM(device="cuda", batch_size=args.batch_size, precision="bf16")
    requests = build_requests(args.task, args.limit)
    lm.loglikelihood(requests, disable_tqdm=True)  # warm-up
    zeus = ZeusMonitor(gpu_indices=[0], sync_execution_with="torch")
    ours = EnergyMeter(NvmlSource([0]), sync=torch.cuda.synchronize)
    rows = []
    for k in range(args.windows):
        key = f"w{k}"
        before = lm.metering.ledger.summary()["total"]
        edges = [(zeus.begin_window, ours.begin_window), (ours.end_window, zeus.end_window)]
        if k % 2:
            edges = [(ours.begin_window, zeus.begin_window), (zeus.end_window, ours.end_window)]
        results = {}
        for call in edges[0]:
            call(key)
        lm.loglikelihood(requests, disable_tqdm=True)
        for call in edges[1]:
            results[call.__self__.__class__.__name__] = call(key)
        after = lm.metering.ledger.summary()["total"]
        z, o = results["ZeusMonitor"], results["EnergyMeter"]
        zeus_j = float(sum(z.gpu_energy.values()))
        wrapper_j = after["energy_joules"] - before["energy_joules"]
        rows.append({
            "window": key, "zeus_outer": k % 2 == 0, "seconds_zeus": z.time,
            "seconds_meter": o.seconds, "joules_zeus": zeus_j, "joules_meter": o.total_joules,
            "joules_hf_metered_ledger": wrapper_j, "meter_flags": list(o.flags),
            "pct_diff_meter_vs_zeus": 100 * (o.total_joules - zeus_j) / zeus_j,
            "pct_diff_ledger_vs_zeus": 100 * (wrapper_j - zeus_j) / zeus_j,
        })
        print(rows[-1], flush=True)
    worst = max(abs(r["pct_diff_meter_vs_zeus"]) for r in rows)
    worst_ledger = max(abs(r["pct_diff_ledger_vs_zeus"]) for r in rows)
    write_json(args.out, {
        "benchmark": "P4 agreement with ZeusMonitor",
        "command": f"python benchmarks/zeus_agreement.py --task {args.task} --limit {args.limit} "
                   f"--batch-size {args.batch_size} --windows {args.windows} --out {args.out}",
        "n_requests_per_window": len(requests), "windows": rows,
        "max_abs_pct_diff_meter_vs_zeus": worst,
        "max_abs_pct_diff_ledger_vs_zeus": worst_ledger,
        "goal": "within 2%", "meets_goal": worst <= 2.0 and worst_ledger <= 2.0,
        "environment": environment(),
    })


if __name__ == "__main__":
    main()
