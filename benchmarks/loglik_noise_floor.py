"""The standard log-likelihood path's own batch-size noise vs shared-prefix scoring (JSON).

May ``mc_scoring=shared_prefix`` become the default? Only if its deviation
from the standard path stays inside the standard path's own floor, i.e. what changing the batch
size alone does to the standard path in the same precision. One process, the 2,000-item frozen
BBQ pass (6,000 requests): the standard path at each ``--batch-sizes`` and shared prefix at the
larger ones, each compared with the standard path at the first batch size: max |diff| of a
request's log-likelihood, and items whose chosen option changes (acc, acc_norm).

    python benchmarks/loglik_noise_floor.py --device cuda --out OUT/loglik_noise_floor.json
"""

from __future__ import annotations

import argparse

from _harness import Deadline, build_requests, command_line, environment, write_json
from p2_throughput import argmax_changes


def compare(requests, reference: list[float], candidate: list[float]) -> dict:
    """Max |diff| (nats) and chosen-option changes of ``candidate`` against ``reference``."""
    diff = max(abs(a - b) for a, b in zip(reference, candidate, strict=True))
    return {"max_abs_diff": diff, "argmax_changes": argmax_changes(requests, reference,
                                                                   candidate)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="bbq_instrument_loglik")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--shared-prefix-batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    deadline = Deadline(args.budget_s)
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    requests = build_requests(args.task, args.limit)
    common = {"device": args.device, "precision": args.precision, "idle_seconds": 0}
    lms = {"standard": HFMeteredLM(batch_size=args.batch_sizes[0], **common),
           "shared_prefix": HFMeteredLM(batch_size=args.shared_prefix_batch_sizes[0],
                                        mc_scoring="shared_prefix", **common)}
    runs = [("standard", b) for b in args.batch_sizes] + [
        ("shared_prefix", b) for b in args.shared_prefix_batch_sizes]
    answers: dict[str, list[float]] = {}
    payload = {"command": command_line("loglik_noise_floor.py", args),
               "environment": environment(), "task": args.task, "n_requests": len(requests),
               "n_items": len({r.doc_id for r in requests}), "precision": args.precision,
               "reference": f"standard@{args.batch_sizes[0]}", "against_reference": {}}
    for path, batch in runs:
        if deadline.left() < 30:
            payload["stopped"] = "device-call time budget"
            break
        lms[path].batch_size_per_gpu = batch
        key = f"{path}@{batch}"
        answers[key] = [a[0] for a in lms[path].loglikelihood(requests, disable_tqdm=True)]
        if key != payload["reference"]:
            payload["against_reference"][key] = compare(requests, answers[payload["reference"]],
                                                        answers[key])
            print(key, payload["against_reference"][key], flush=True)
        floor = [v for k, v in payload["against_reference"].items() if k.startswith("standard")]
        if floor:
            payload["standard_floor"] = {
                "max_abs_diff": max(v["max_abs_diff"] for v in floor),
                "argmax_changes_acc": max(v["argmax_changes"]["acc"] for v in floor),
                "argmax_changes_acc_norm": max(v["argmax_changes"]["acc_norm"] for v in floor)}
        payload["mc_scoring"] = lms["shared_prefix"].metering_info()["mc_scoring"]
        write_json(args.out, payload)


if __name__ == "__main__":
    main()
