"""hf-metered must not change what the model sees behind the user's back.

* lm-eval's request objects are never mutated (CachingLM hashes them before and after a call).
* ``--use_cache DIR`` run twice: the second run makes no model call (nothing is metered).
* ``chat_template=off``: the same outputs as ``--model hf``, item for item, on both paths.
"""

from __future__ import annotations

import copy
import json

import pytest
from helpers import package_task_manager, run_cli

pytestmark = pytest.mark.slow


def _results(out_dir):
    [path] = sorted(out_dir.rglob("results_*.json"))
    return json.loads(path.read_text())


def _samples(out_dir, task):
    [path] = [p for p in out_dir.rglob(f"samples_{task}_*.jsonl")
              if p.name.removeprefix(f"samples_{task}_")[:1].isdigit()]  # not {task}_loglik
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_generation_requests_are_not_mutated(embedded_lm):
    task = package_task_manager().load(["bbq_subset_12p5pct"])["tasks"]["bbq_subset_12p5pct"]
    task.build_all_requests(limit=2, rank=0, world_size=1)
    requests = list(task.instances)
    before = [copy.deepcopy(r.arguments) for r in requests]
    embedded_lm.generate_until(requests)
    assert [r.arguments for r in requests] == before
    assert not any("<|im_start|>" in r.arguments[0] for r in requests)


TASKS = ("bbq_subset_12p5pct", "bbq_subset_12p5pct_loglik")  # generative and log-likelihood
FAST = ["--tasks", ",".join(TASKS), "--limit", "2", "--batch_size", "2",
        "--gen_kwargs", "max_gen_toks=24", "--log_samples"]


def test_use_cache_twice_makes_no_model_call_and_a_rerun_resumes(tmp_path, embedded_checkpoint):
    """Second run: no model call. Third run with one more item (a killed run's rerun): only
    the new item's requests reach the model."""
    cache = tmp_path / "cache" / "lm"
    outputs = []
    for attempt, limit in (("first", "2"), ("second", "2"), ("resumed", "3")):
        out = tmp_path / attempt
        args = [a if a != "2" else limit for a in FAST]  # FAST's --limit and --batch_size
        proc = run_cli(["lm_eval", "--model", "hf-metered", "--model_args", "idle_seconds=0",
                        *args, "--use_cache", str(cache), "--output_path", str(out)])
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs.append(out)
    # the embedded model's output folder is named by model and the precision the run records
    assert [p.name for p in outputs[0].iterdir()] == ["SmolLM2-135M-Instruct__embedded__fp32"]
    first, second, resumed = (_results(o)["config"]["metering"] for o in outputs)
    assert first["precision"] == "fp32"
    assert first["generation"]["cuda_graphs"] is None  # a CPU run: graphs do not apply
    started = [line for line in proc.stderr.splitlines() if line.startswith("[hf-metered]")]
    assert len(started) == 1 and len(started[0]) < 200, started  # one short line
    assert set(first["per_task"]) == set(TASKS)
    assert second["per_task"] == {}  # every request answered from the cache: no window opened
    assert resumed["per_task"]["bbq_subset_12p5pct"]["n_requests"] == 1
    assert resumed["per_task"]["bbq_subset_12p5pct_loglik"]["n_requests"] == 3
    for task in TASKS:
        resps = [[s["resps"] for s in _samples(o, task)] for o in outputs]
        assert resps[0] == resps[1] == resps[2][:2]


def test_chat_template_off_equals_model_hf_item_for_item(tmp_path, embedded_checkpoint):
    runs = {}
    for name, model, args in (
            ("hf", "hf", f"pretrained={embedded_checkpoint}"),
            ("metered", "hf-metered", "chat_template=off,idle_seconds=0")):
        out = tmp_path / name
        proc = run_cli(["lm_eval", "--model", model, "--model_args", args, *FAST,
                        "--output_path", str(out)])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert _results(out)["config"]["model"] == model  # --model hf still works with the hook
        runs[name] = {task: _samples(out, task) for task in TASKS}
    for task in TASKS:
        metered, hf = runs["metered"][task], runs["hf"][task]
        assert [s["arguments"] for s in metered] == [s["arguments"] for s in hf]
        if task.endswith("_loglik"):
            for a, b in zip(metered, hf, strict=True):
                assert [float(r[0][0]) for r in a["resps"]] == pytest.approx(
                    [float(r[0][0]) for r in b["resps"]], abs=1e-4)
        else:
            assert [s["resps"] for s in metered] == [s["resps"] for s in hf]


def test_default_header_states_what_hf_metered_adds(embedded_lm):
    """The header against the facts it reports, read from the model, torch and the machine."""
    from pathlib import Path

    header = embedded_lm.header()
    dtype = {"torch.float32": "fp32", "torch.bfloat16": "bf16"}[str(embedded_lm.model.dtype)]
    assert header.startswith(f"[hf-metered] precision={dtype}; ")
    rapl = any(Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj"))
    assert ("energy=rapl" if rapl else "energy=unavailable: RAPL not readable") in header
    assert "synced: none" in header  # the CPU: no device to synchronise
    # generation goes through the chat template exactly when the tokenizer has one
    assert embedded_lm.tokenizer.chat_template is not None
    assert "through the tokenizer's chat template as one user turn" in header
    assert "log-likelihood requests unchanged" in header  # mc_scoring=standard
    assert embedded_lm.get_model_info()["hf_metered"]["adds"] == header  # recorded in full
    line = embedded_lm.start_line()  # printed: short, the same facts
    assert line.startswith(f"[hf-metered] precision={dtype}, energy=") and len(line) < 200
    assert "config.hf_metered.adds" in line
