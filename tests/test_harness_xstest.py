"""XSTest through lm-eval and Inspect AI: the same response classes (split from
test_harness_compare.py so that its two long runs can go to different workers)."""

from __future__ import annotations

import pytest
from helpers import INSPECT_CAP, LM_CAP, inspect_eval, run_cli

from lm_eval_ext.cross_harness.compare import compare_harnesses
from lm_eval_ext.cross_harness.readers import read_harness_run


@pytest.mark.slow
def test_xstest_through_lm_eval_and_inspect_gives_the_same_classes(tmp_path, data_dir,
                                                                   embedded_checkpoint):
    lm = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                  "idle_seconds=0", "--tasks", "xstest_ext", "--limit", "2", "--output_path",
                  str(tmp_path / "lm"), "--log_samples", *LM_CAP])
    assert lm.returncode == 0, lm.stderr[-3000:]
    log = inspect_eval(["lm_eval_ext/xstest_ext", "--limit", "2", "--model", "hf/local", "-M",
                    f"model_path={embedded_checkpoint}", "-M", "device=cpu", "-M",
                    "do_sample=false", *INSPECT_CAP], {"LOG_DIR": str(tmp_path / "inspect")})
    runs = [read_harness_run(f"lm_eval={tmp_path / 'lm'}"), read_harness_run(f"inspect={log}")]
    keys = ["xstest:1", "xstest:2"]
    for run in runs:
        assert sorted(run.items["item_key"]) == keys and set(run.items["benchmark"]) == {"xstest"}
    a, b = (r.items.set_index("item_key").loc[keys] for r in runs)
    assert list(a["answer"]) == list(b["answer"])  # the same response classes
    assert list(a["correct"]) == list(b["correct"])
    result = compare_harnesses(runs, n_resamples=200)
    assert list(result.agreement["metric"]) == ["accuracy"]
    assert result.agreement["answer_agreement"].iloc[0] == 1.0
    total = result.attribution.set_index("component")["value_pp"]["total"]
    assert total == pytest.approx(100 * (b["correct"].mean() - a["correct"].mean())) == 0.0
