"""vllm-metered vs hf-metered (lm-eval's loop and the fast path), side by side in one process.

The embedded model in bf16, per round (order rotating): the headline generative task
(``bbq_subset_25pct``, 500 items) and the 2,000-item log-likelihood pass
(``bbq_instrument_loglik``). Per run: inference s, J/item, new tokens/s, idle share (the
package's ``config.metering``), and an outside reading of the same NVML counter taken by this
script around each request call lm-eval makes (not through the package), to check the metered
energy. Per condition: identical generated text and log-likelihood max |diff| / argmax
changes against hf-metered's standard loop. ``--runs DIR`` keeps round 0's lm-eval outputs
(results + samples, for ``lm-eval-ext analyze``; never commit the samples).

``--size llama-8b`` (any size of ``energy_sizes.py``) runs a randomly initialised model of
that shape instead (built and saved in a child process, so this process starts the engine
before it uses CUDA): speed and energy only, labelled so in the JSON.

    python benchmarks/vllm_compare.py --out $OUT/vllm_compare.json --runs /tmp/vruns
    python benchmarks/vllm_compare.py --size llama-8b --limit 500 --batch 128 --out $OUT/v8b.json
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time

from _harness import (
    Deadline,
    command_line,
    environment,
    save_run,
    task_manager,
    use_generation,
    write_json,
)
from energy_sizes import random_init_checkpoint

GEN, LOGLIK = "bbq_subset_25pct", "bbq_instrument_loglik"
REQUEST_TYPES = ("generate_until", "loglikelihood")


class OutsideMeter:
    """NVML's energy counter read by this script around each request call of one model."""

    def __init__(self, indices: list[int]):
        self.handles: list = []
        if indices:  # none: a CPU smoke run (0 J)
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.joules = 0.0
        self.seconds = 0.0

    def _read(self) -> float:
        return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles) / 1e3

    def wrap(self, lm) -> None:
        """Put the counter around ``lm``'s request methods (instance attributes)."""
        for name in REQUEST_TYPES:
            inner = getattr(lm, name)

            def metered(requests, disable_tqdm: bool = False, _inner=inner):
                started, joules = time.perf_counter(), self._read()
                try:
                    return _inner(requests, disable_tqdm)
                finally:
                    self.joules += self._read() - joules
                    self.seconds += time.perf_counter() - started

            setattr(lm, name, metered)

    def take(self) -> tuple[float, float]:
        """(joules, seconds) since the last take."""
        out = (self.joules, self.seconds)
        self.joules = self.seconds = 0.0
        return out


def run_once(lm, outside: OutsideMeter, condition: str, limit: int | None,
             save_to: str | None) -> tuple[dict, dict]:
    """Both tasks through ``lm``; the row and the per-item answers."""
    from lm_eval import simple_evaluate

    lm.reset_metering()
    outside.take()
    results = simple_evaluate(model=lm, tasks=[GEN, LOGLIK], task_manager=task_manager(),
                              log_samples=True, limit=limit, bootstrap_iters=0)
    outside_joules, outside_seconds = outside.take()
    samples = results["samples"]
    answers = {task: [s["resps"] for s in sorted(samples[task], key=lambda s: s["doc_id"])]
               for task in (GEN, LOGLIK)}
    if save_to:
        save_run(results, save_to, condition)
    m = results["config"]["metering"]
    texts = [r[0][0] for r in answers[GEN]]
    new_tokens = sum(len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    row = {"condition": condition, "energy_joules": m["energy_joules"],
           "inference_seconds": m["inference_seconds"], "idle_share": m["idle_share"],
           "forward_share": m["forward_share"], "flags": m["flags"], "gpus": m["gpus"],
           "outside_nvml_joules": outside_joules, "outside_seconds": outside_seconds,
           "metered_vs_outside_pct": None if not m["energy_joules"] else
           100 * (m["energy_joules"] - outside_joules) / outside_joules,
           "batch_size": m.get("batch_size"), "engine": m.get("engine"),
           "generation": m.get("generation"), "per_task": {}}
    for task in (GEN, LOGLIK):
        t = m["per_task"][task]
        items = len(answers[task])
        row["per_task"][task] = {
            "items": items, "inference_seconds": t["inference_seconds"],
            "energy_joules": t["energy_joules"], "idle_share": t["idle_share"],
            "j_per_item": None if t["energy_joules"] is None else t["energy_joules"] / items,
            "items_per_s": items / t["inference_seconds"], "flags": t["flags"]}
    row["per_task"][GEN]["new_tokens"] = new_tokens
    row["per_task"][GEN]["new_tokens_per_s"] = new_tokens / m["per_task"][GEN]["inference_seconds"]
    return row, answers


def agreement(answers: dict, reference: dict) -> dict:
    """Identical texts; log-likelihood max |diff| and changed per-item argmax."""
    same = sum(a == b for a, b in zip(answers[GEN], reference[GEN], strict=True))
    diffs, argmax_changes = [], 0
    for mine, ref in zip(answers[LOGLIK], reference[LOGLIK], strict=True):
        a, b = [r[0][0] for r in mine], [r[0][0] for r in ref]
        diffs += [abs(x - y) for x, y in zip(a, b, strict=True)]
        argmax_changes += a.index(max(a)) != b.index(max(b))
    return {"identical_texts": same, "items": len(answers[GEN]),
            "loglik_max_abs_diff": max(diffs), "loglik_median_abs_diff": statistics.median(diffs),
            "loglik_argmax_changes": argmax_changes, "loglik_items": len(answers[LOGLIK])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, help="items per task (default: all)")
    parser.add_argument("--batch", type=int, default=512,
                        help="hf-metered's batch and vLLM's max_num_seqs")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--budget-seconds", type=float, default=540)
    parser.add_argument("--runs", help="save round 0's lm-eval output folders here")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run (stand-in engine)")
    parser.add_argument("--size", help="a random-init shape of energy_sizes.py (e.g. llama-8b) "
                                       "instead of the embedded model")
    parser.add_argument("--workdir", default="/tmp/vllm_compare",
                        help="where --size's checkpoint is saved (removed at the end)")
    args = parser.parse_args()
    deadline = Deadline(args.budget_seconds)
    pretrained, model = None, {"model": "embedded SmolLM2-135M-Instruct"}
    if args.size:
        pretrained, model = random_init_checkpoint(args.size, args.workdir, args.device)
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.backends.vllm.metered import VLLMMeteredLM

    started = time.perf_counter()  # the engine first: it starts before this process uses CUDA
    vllm = VLLMMeteredLM(pretrained=pretrained, precision="bf16", batch_size=str(args.batch),
                         gpu_memory_utilization=args.gpu_memory_utilization)
    engine_start = time.perf_counter() - started
    hf = HFMeteredLM(pretrained=pretrained, device=args.device, precision="bf16",
                     batch_size=args.batch)
    gpus = [0] if args.device.startswith("cuda") else []
    meters = {"vllm": OutsideMeter(gpus), "hf": OutsideMeter(gpus)}
    meters["vllm"].wrap(vllm)
    meters["hf"].wrap(hf)

    def use(path: str):
        use_generation(hf, requested=path, max_batch_size=None,
                       batch_size_asked=None if path == "fast" else args.batch)
        return hf

    conditions = {"hf_standard": lambda: use("standard"), "hf_fast": lambda: use("fast"),
                  "vllm": lambda: vllm}
    names = list(conditions)
    runs, answers = [], {}
    payload = {"command": command_line("vllm_compare.py", args), "environment": environment(),
               "tasks": [GEN, LOGLIK], "reference": names[0], **model,
               "vllm_engine_start_seconds": engine_start, "runs": runs}
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if deadline.left() < 90:
                payload["stopped"] = "device-call time budget"
                break
            lm = conditions[name]()
            save = f"{args.runs}/{name}" if args.runs and round_index == 0 else None
            row, got = run_once(lm, meters["vllm" if name == "vllm" else "hf"], name,
                                args.limit, save)
            runs.append({**row, "round": round_index})
            answers.setdefault(name, got)
            print({k: row[k] for k in ("condition", "inference_seconds", "energy_joules",
                                       "metered_vs_outside_pct")}, flush=True)
            if names[0] in answers:
                payload["agreement_vs_" + names[0]] = {
                    n: agreement(a, answers[names[0]]) for n, a in answers.items()}
            write_json(args.out, payload)
    vllm.shutdown()
    write_json(args.out, payload)
    if args.size:
        shutil.rmtree(pretrained, ignore_errors=True)


if __name__ == "__main__":
    main()
