"""Where the headline's CPU time goes on the fast path: the prompt pass vs the decode steps.

The headline task's first ``--items`` prompts through hf-metered (fp32, CPU, the fast path
as configured), every forward call of the model timed: prompt-pass calls (more than one token
per row: the shared prefix and the rows' own tokens) against decode steps (one token per
row). Also the prompts' length in tokens (chat template applied) and how many tokens every
prompt starts with.

    python benchmarks/cpu_prefill_split.py --items 128 --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import time

from _harness import build_requests, command_line, environment, write_json

TASK = "bbq_subset_25pct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=128)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.generation.settings import CPU_BATCH

    lm = HFMeteredLM(device="cpu", precision="fp32")
    requests = build_requests(TASK, args.items)
    prompts = [lm.tokenizer.apply_chat_template([{"role": "user", "content": r.args[0]}],
                                                tokenize=True, add_generation_prompt=True)
               ["input_ids"] for r in requests]
    common = next(i for i in range(min(map(len, prompts)))
                  if len({p[i] for p in prompts}) > 1)
    seconds = {"prompt_pass": 0.0, "decode": 0.0}
    calls = {"prompt_pass": 0, "decode": 0}
    forward = lm.model.forward

    def timed(*a, **kw):
        kind = "prompt_pass" if kw["input_ids"].shape[1] > 1 else "decode"
        started = time.perf_counter()
        try:
            return forward(*a, **kw)
        finally:
            seconds[kind] += time.perf_counter() - started
            calls[kind] += 1

    lm.model.forward = timed
    started = time.perf_counter()
    lm.generate_until(requests, disable_tqdm=True)
    total = time.perf_counter() - started
    write_json(args.out, {
        "command": command_line("cpu_prefill_split.py", args), "environment": environment(),
        "task": TASK, "items": len(requests), "cpu_batch": CPU_BATCH,
        "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        "common_prefix_tokens": common, "generate_seconds": total, "seconds": seconds,
        "calls": calls, "prompt_pass_share": seconds["prompt_pass"] / total})


if __name__ == "__main__":
    main()
