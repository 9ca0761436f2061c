"""Batch-1 log-likelihood scoring with replayed CUDA graphs against lm-eval's own forward.

    python benchmarks/loglik_graphs_ab.py --rounds 2 --out F [--limit N] [--size llama-8b]

One hf-metered model (the embedded SmolLM2, or a random-init shape of ``energy_sizes.py``),
bf16, batch 1, on ``bbq_instrument_loglik`` (the 2,000-item instrument unless ``--limit``):
rounds alternate graphs on and off on the same loaded model, graphs first (so they pay the
process's first forwards at every shape). Per round: inference seconds and joules (the
metered window), requests, what the scoring forwards did; then every answer of the first
graph round against the first round without graphs (identical items, the largest
log-likelihood difference, items whose chosen option differs). ``--noise-batch N`` adds lm-eval's
own path at batch N on the same weights, counted the same way against batch 1: the standard
path's own noise, to read the graphs' differences against.
"""

from __future__ import annotations

import argparse
import statistics

from _harness import environment, task_manager, write_json


def score(lm, limit: int | None) -> tuple[dict, list]:
    """One round: the metering block and the answers of every item."""
    from lm_eval import simple_evaluate

    lm.reset_metering()
    out = simple_evaluate(model=lm, tasks=["bbq_instrument_loglik"], limit=limit,
                          task_manager=task_manager(), log_samples=True, bootstrap_iters=0)
    rows = out["samples"]["bbq_instrument_loglik"]
    return out["config"]["metering"], [[[float(r[0][0]), r[0][1]] for r in row["resps"]]
                                       for row in sorted(rows, key=lambda r: r["doc_id"])]


def differences(a: list, b: list) -> dict:
    """Two rounds' answers item by item: identical items, largest gap, choices that differ."""
    gaps = [abs(x[0] - y[0]) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True)]
    choice = [max(range(len(p)), key=lambda i: p[i][0]) for p in a]
    other = [max(range(len(q)), key=lambda i: q[i][0]) for q in b]
    return {"items": len(a), "identical_items": sum(p == q for p, q in zip(a, b, strict=True)),
            "max_abs_loglik_difference": max(gaps, default=0.0),
            "choices_differing": sum(x != y for x, y in zip(choice, other, strict=True))}


def main() -> None:  # noqa: D103
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds per path (alternated)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--size", help="a random-init shape of energy_sizes.py (e.g. llama-8b)")
    parser.add_argument("--noise-batch", type=int, help="also lm-eval's path at this batch size")
    parser.add_argument("--workdir", default="/tmp/loglik_ab")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.backends.warm import keep_loaded_models

    keep_loaded_models()  # a second batch size reuses the loaded weights

    model_args, model = {}, {"model": "embedded SmolLM2-135M-Instruct"}
    if args.size:
        from energy_sizes import random_init_checkpoint

        model_args["pretrained"], model = random_init_checkpoint(args.size, args.workdir, "cuda")
    lm = HFMeteredLM(device="cuda", precision="bf16", batch_size=1, **model_args)
    rounds, answers = [], {}
    for index in range(2 * args.rounds):
        graphs = index % 2 == 0
        lm.use_scoring_graphs(graphs)
        metering, round_answers = score(lm, args.limit)
        answers.setdefault(graphs, round_answers)
        rounds.append({"graphs": graphs, "inference_seconds": metering["inference_seconds"],
                       "energy_joules": metering["energy_joules"],
                       "idle_share": metering["idle_share"],
                       "forward_share": metering["forward_share"],
                       "gpus": metering["gpus"], "scoring_graphs": metering["scoring_graphs"],
                       "items": len(round_answers)})
        print(rounds[-1]["graphs"], rounds[-1]["inference_seconds"], flush=True)
    noise = None
    if args.noise_batch:
        batched = HFMeteredLM(device="cuda", precision="bf16", batch_size=args.noise_batch,
                              cuda_graphs=False, **model_args)
        metering, noisy = score(batched, args.limit)
        noise = {"batch_size": args.noise_batch, "inference_seconds":
                 metering["inference_seconds"], **differences(noisy, answers[False])}
    seconds = {g: [r["inference_seconds"] for r in rounds if r["graphs"] is g]
               for g in (True, False)}
    write_json(args.out, {
        **model, "limit": args.limit, "rounds": rounds,
        "graphs_against_standard": differences(answers[True], answers[False]),
        "standard_batch_noise": noise,
        "speedup_median": statistics.median(seconds[False]) / statistics.median(seconds[True]),
        "environment": environment()})


if __name__ == "__main__":
    main()
