"""Bad input tried as a new user would: each case is a clear error (or flag), never a silent number.

Synthetic runs in lm-eval's layout (``analysis.synthetic.write_run``) stand in for real ones;
the model-arg cases fail before any model is loaded.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli

from lm_eval_ext.analysis import AnalysisInputError, analyze
from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.loader import load_runs, split_run_argument
from lm_eval_ext.analysis.report import check_output_folder
from lm_eval_ext.analysis.report_markdown import verdict_of
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership
from lm_eval_ext.errors import ConfigError

FAST = {"n_resamples": 200, "mc_draws": 10, "progress": False}


@pytest.fixture(scope="module")
def rows(data_dir):
    return load_membership("25pct").rows


@pytest.fixture()
def two_runs(rows, tmp_path):
    rng = np.random.default_rng(0)
    base = simulate_predictions(rows, 0.5, rng)
    ref = write_run(tmp_path / "ref", "bbq_subset_25pct_loglik", rows, base)
    run = write_run(tmp_path / "precision=int8", "bbq_subset_25pct_loglik", rows,
                    simulate_predictions(rows, 0.5, rng, base=base, flip_rate=0.2))
    return ref, run


def test_name_equals_path_only_for_identifiers_and_existing_paths(two_runs, tmp_path):
    ref, run = two_runs
    folder = str(run.parents[1])  # .../precision=int8
    assert split_run_argument(folder) == (None, folder)
    assert split_run_argument(f"int8={folder}") == ("int8", folder)
    assert split_run_argument("int8=/no/such/folder") == (None, "int8=/no/such/folder")
    [loaded] = load_runs([folder])
    assert "precision=int8" in str(loaded.results_path)
    # an empty NAME was read as a path "=PATH" that "does not exist" (trial 2)
    with pytest.raises(AnalysisInputError) as error:
        split_run_argument(f"={folder}")
    assert str(error.value) == (f"={folder}: the NAME before = is empty; write NAME={folder} "
                                f"(e.g. base={folder}), or the path alone")
    assert split_run_argument(f"base={folder}") == ("base", folder)  # followed
    # a NAME of other characters: "a/b=PATH does not exist" pointed at the path (trial 7)
    for name, usable in (("a/b", "a_b"), ("1x", "run_1x"), ("mé", "m_")):
        with pytest.raises(AnalysisInputError) as error:
            split_run_argument(f"{name}={folder}")
        assert str(error.value) == (
            f"{name}={folder}: the NAME {name!r} is not a run name (letters, digits and _ . + -, "
            f"not starting with a digit or one of . + -); write e.g. {usable}={folder}")
        assert split_run_argument(f"{usable}={folder}") == (usable, folder)  # followed


@pytest.mark.parametrize(("label", "usable"), [("b4,x", "b4_x"), ("β1", "_1"), ("b=4", "b_4")])
def test_a_label_that_is_not_a_run_name_is_refused_as_the_name_would_be(label, usable,
                                                                       two_runs):
    """trial 14: --label 'b4,x' (or β1, b=4) named the run so; recommend --order/--weights could
    then name it in no way."""
    ref, run = two_runs
    with pytest.raises(AnalysisInputError) as error:
        analyze(ref, [run], labels=["ref", label], **FAST)
    assert str(error.value) == (
        f"--label {label!r} is not a run name (letters, digits and _ . + -, not starting with a "
        f"digit or one of . + -); write e.g. {usable}")


def test_several_runs_under_one_reference_is_an_error_listing_them(two_runs, tmp_path):
    ref, run = two_runs
    with pytest.raises(AnalysisInputError, match=r"holds 2 runs:(.|\n)*precision=int8(.|\n)*ref"):
        analyze(tmp_path, [run], **FAST)


def test_same_results_file_as_reference_and_run_is_an_error(two_runs):
    ref, _ = two_runs
    with pytest.raises(AnalysisInputError, match="are the same folder"):
        analyze(ref, [ref], **FAST)


def test_samples_file_cut_at_a_line_boundary_is_an_error(two_runs):
    ref, run = two_runs
    samples = next(run.parent.glob("samples_*.jsonl"))
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:-3]))
    with pytest.raises(AnalysisInputError, match="holds 497 samples but .* reports 500"):
        load_runs([run])


def test_damaged_sample_key_names_the_file_and_field(two_runs):
    ref, run = two_runs
    samples = next(run.parent.glob("samples_*.jsonl"))
    lines = samples.read_text().splitlines()
    broken = json.loads(lines[5])
    del broken["doc"]["unit_id"]
    lines[5] = json.dumps(broken)
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisInputError, match=r"line 6's hashes do not match its own doc"):
        load_runs([run])  # lm-eval's line hashes catch the edit first
    for key in ("doc_hash", "prompt_hash", "target_hash"):  # a harness that logs no hashes
        del broken[key]
    lines[5] = json.dumps(broken)
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisInputError, match=r"sample 6 of task .*unit_id"):
        load_runs([run])


def test_task_scored_by_exact_match_is_read_not_zeroed(rows, tmp_path):
    from lm_eval_ext.analysis.items import extract_items

    samples = [{"doc_id": i, "doc": {"question": "q"}, "filtered_resps": ["x"],
                "metrics": ["exact_match"], "exact_match": float(i % 2)} for i in range(6)]
    items = extract_items("upstream_task", {"output_type": "generate_until"}, samples)
    assert items["correct"].tolist() == [False, True] * 3
    without = [{k: v for k, v in s.items() if k != "exact_match"} | {"metrics": ["bleu"],
                                                                     "bleu": 3.2} for s in samples]
    from lm_eval_ext.analysis.items import SampleError

    with pytest.raises(SampleError, match=r"no per-item 0/1 score .*\(its metrics: bleu\)"):
        extract_items("upstream_task", {"output_type": "generate_until"}, without)


@pytest.mark.parametrize(("option", "value", "message", "advised"), [
    ("level", 0.0, "--level 0.0 is not a confidence level; use a value in [0.5, 1), e.g. "
     "--level 0.95", 0.95),
    ("level", 1.5, "--level 1.5 is not a confidence level", 0.95),
    ("seed", -1, "--seed -1 is negative; use a seed >= 0", 0),
    ("n_resamples", 10, "--bootstrap must be >= 100 and --mc-draws >= 10 (got 10 and 10)", 100),
    ("mc_draws", 9, "--bootstrap must be >= 100 and --mc-draws >= 10 (got 200 and 9)", 10)])
def test_bad_settings_fail_before_any_work_and_the_advised_value_runs(two_runs, option, value,
                                                                      message, advised):
    ref, run = two_runs
    with pytest.raises(AnalysisInputError) as error:
        analyze(ref, [run], **{**FAST, option: value})
    assert str(error.value).startswith(message)
    result = analyze(ref, [run], **{**FAST, option: advised})  # followed
    assert result.n_items == 500 and len(result.run_ids) == 1


def test_out_folder_is_never_mixed(tmp_path):
    target = tmp_path / "report"
    assert check_output_folder(target) is False  # new: fine
    target.mkdir()
    (target / "report.md").write_text("old")
    (target / "items.csv").write_text("old")
    with pytest.raises(AnalysisInputError, match="--overwrite"):
        check_output_folder(target)
    assert check_output_folder(target, overwrite=True)  # replaced whole (files.swap_in)
    (target / "stale.csv").write_text("old")  # no table of analyze's: the user's, kept
    with pytest.raises(AnalysisInputError, match="also holds stale.csv, which analyze did not"):
        check_output_folder(target, overwrite=True)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(AnalysisInputError, match="holds no earlier analysis"):
        check_output_folder(other, overwrite=True)
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(AnalysisInputError) as error:  # analyze's --out check refuses it earlier
        check_output_folder(file)
    assert str(error.value) == f"--out {file} is a file; pass a folder for the report"
    assert check_output_folder(tmp_path / "folder") is False  # followed


def test_cli_reports_bad_out_and_card_folder_as_errors(two_runs, tmp_path):
    ref, run = two_runs
    file = tmp_path / "file.txt"
    file.write_text("x")
    proc = run_cli(["lm-eval-ext", "analyze", "--reference", str(ref), "--runs", str(run),
                    "--out", str(file), "--no-progress"])
    assert proc.returncode == 2 and "is a file" in proc.stderr
    proc = run_cli(["lm-eval-ext", "mde", "--m", "500", "--rho-d", "0.1", "--card",
                    str(tmp_path / "missing" / "card.md")])
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_nan_interval_reads_not_estimable_and_disagreement_reads_borderline():
    row = pd.Series({"ci_low": math.nan, "ci_high": math.nan, "reference": 0.5, "value": 0.4,
                     "n_clusters": 1, "p_value": math.nan})
    assert verdict_of(row) == "not estimable (fewer than 2 natural units)"
    # trial 15: under --cluster template the reason named natural units
    assert verdict_of(row, cluster="template") == "not estimable (fewer than 2 templates)"
    assert verdict_of(row.copy().replace({0.4: math.nan})).startswith(
        "not estimable (the metric is undefined")
    row = pd.Series({"ci_low": 0.8, "ci_high": 10.3, "reference": 0.0, "value": 0.05,
                     "n_clusters": 125, "p_value": 0.07})
    assert verdict_of(row).startswith("borderline")
    assert verdict_of(row.copy().replace({0.07: 0.01})).startswith("changed")


def test_energy_ratio_refused_across_gpus(rows, tmp_path):
    rng = np.random.default_rng(1)
    preds = simulate_predictions(rows, 0.5, rng)
    paths = []
    for name, uuid in (("a", "GPU-aaaa"), ("b", "GPU-bbbb")):
        paths.append(write_run(tmp_path / name, "bbq_subset_25pct_loglik", rows, preds,
                               energy_joules=100.0, inference_seconds=10.0))
        results = json.loads(paths[-1].read_text())
        results["config"]["metering"]["gpus"] = [{"index": 0, "uuid": uuid}]
        paths[-1].write_text(json.dumps(results))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = analyze(paths[0], [paths[1]], **FAST)
    assert any(issubclass(w.category, DegenerateDataWarning) and "different GPUs" in str(w.message)
               for w in seen)
    run = result.runs.iloc[1]
    assert math.isnan(run["energy_ratio"]) and "different GPUs" in run["energy_ratio_note"]


@pytest.mark.parametrize(("args", "message"), [
    ({"sync": "no"}, "sync='no' is not a boolean; use sync=true or sync=false"),
    ({"codecarbon": "off"}, "codecarbon='off' is not a boolean"),
    ({"idle_seconds": "abc"}, "idle_seconds='abc' must be a number"),
    ({"batch_size": 0}, "batch_size=0 is not valid; use a positive integer, auto or auto:N"),
    ({"batch_size": -1}, "batch_size=-1 is not valid"),
    ({"batch_size": "abc"}, "batch_size='abc' is not valid"),
    ({"pretrained": "/nonexistent/model"}, "the local path /nonexistent/model does not exist"),
    ({"pretrained": "gemma3-27m"}, "pretrained='gemma3-27m' is no model folder, packaged model "
     "or model in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE); did you mean "
     "pretrained=gemma3-270m?"),
    ({"pretrained": "nobody/no-model"}, "and the hub is offline (HF_HUB_OFFLINE); pass a model "
     "folder or a packaged model (gemma3-270m)"),
    ({"energy": "nvml", "device": "cpu"}, "energy=nvml needs the model on a CUDA GPU"),
    ({"precison": "bf16"}, "unknown model arg(s) precison (did you mean precision?)"),
    ({"template_tier": "cot"}, "template_tier is a task setting, not a model arg: pass "
     "--metadata '{\"template_tier\": \"cot\"}' instead of --model_args"),
    ({"max_gen_toks": 16}, "max_gen_toks is a generation setting, not a model arg: pass "
     "--gen_kwargs max_gen_toks=VALUE instead of --model_args (a campaign: the lm_eval block's "
     "or a condition's gen_kwargs)"),  # trial 17 (N17_16): "did you mean max_length?"
    # trial 18 (N18_63): "unknown model arg(s) load_in_8bit; valid: <56 names>"
    ({"load_in_8bit": True}, "hf-metered: load_in_8bit is not a model arg here (transformers 5 "
     "no longer takes it): leave it out and give precision=int8"),
    ({"load_in_4bit": True}, "load_in_4bit is not a model arg here (transformers 5 no longer "
     "takes it): leave it out and give precision=nf4 (or fp4)"),
    # trial 19 (N19_138, N19_139): switched off it was told to quantise; quantization_config
    # was an unknown arg among 56 names
    ({"load_in_8bit": False}, "load_in_8bit is not a model arg here (transformers 5 no longer "
     "takes it): leave it out (load_in_8bit=False asks for no quantisation, the default)"),
    ({"load_in_8bit": True, "precision": "int8"}, "load_in_8bit is not a model arg here "
     "(transformers 5 no longer takes it): leave it out and give precision=int8"),
    ({"quantization_config": "{}"}, "quantization_config is not a model arg here (transformers "
     "5 no longer takes it): leave it out and give precision=int8, nf4 or fp4 (bitsandbytes)"),
    ({"precision": "int3"}, "precision='int3' is not valid; use one of bf16"),
    ({"mc_scoring": "packed"}, "mc_scoring='packed' is not valid; use one of standard"),
    ({"generation": "turbo"}, "generation='turbo' is not valid; use one of standard, fast"),
    ({"chat_template": "of"}, "chat_template='of' is not valid; use one of auto, off"),
])
def test_bad_model_args_fail_before_the_model_loads(args, message, monkeypatch):
    from lm_eval_ext.backends import embedded_model
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    def no_load():
        raise AssertionError("the model must not be touched before the args are valid")

    monkeypatch.setattr(embedded_model, "ensure_checkpoint", no_load)
    pattern = re.escape(message)
    with pytest.raises(ConfigError, match=pattern):
        HFMeteredLM(**args)
    # the dry-run check (campaign, grid, sequential) refuses the same args the same way
    with pytest.raises(ConfigError, match=pattern):
        HFMeteredLM.check_model_args(",".join(f"{k}={v}" for k, v in args.items()))


def test_batch_size_in_model_args_and_cli_explains_the_clash():
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    with pytest.raises(ConfigError, match="pass it once, as --batch_size 4"):
        HFMeteredLM.create_from_arg_string("batch_size=4", {"batch_size": "1"})  # typed 1
    # (lm-eval's default, the int 1, is no clash: tests/test_advice.py)
    # lm-eval's CLI passes --model_args as a dict (create_from_arg_obj): the same check
    with pytest.raises(ConfigError, match="pass it once, as --batch_size 4"):
        HFMeteredLM.create_from_arg_obj({"batch_size": 4}, {"batch_size": 8, "device": None})


def test_the_same_batch_size_given_both_ways_is_taken_once():
    from lm_eval_ext.backends.model_args import merge_model_args

    merged = merge_model_args("hf-metered", {"batch_size": 8, "precision": "fp32"},
                              {"batch_size": "8", "max_batch_size": None, "device": "cpu"})
    assert merged == {"precision": "fp32", "batch_size": "8", "device": "cpu"}


@pytest.mark.slow
def test_regression_cli_batch_size_in_model_args_and_flag(tmp_path, embedded_checkpoint):
    """``--model_args batch_size=8 --batch_size 8`` (documented as accepted) and
    ``batch_size=4 --batch_size 8`` (documented as a clear error) both crashed with
    ``TypeError: ... got multiple values for keyword argument 'batch_size'``."""
    common = ["lm-eval-ext", "run", "--model", "hf-metered", "--tasks",
              "bbq_subset_12p5pct_loglik", "--limit", "1", "--output_path", str(tmp_path)]
    clash = run_cli([*common, "--model_args", "batch_size=4,idle_seconds=0",
                     "--batch_size", "8"])
    assert clash.returncode == 2 and "Traceback" not in clash.stderr
    assert clash.stderr.strip().splitlines()[-1] == (
        "lm-eval-ext: error: hf-metered: batch_size=4 in --model_args conflicts with lm-eval's "
        "--batch_size ('8'); pass it once, as --batch_size 4")
    # also the explicit fallback: `lm-eval-ext run` needs no start-up hook
    same = run_cli([*common, "--model_args", "batch_size=2,idle_seconds=0", "--batch_size", "2"],
                   env={"LM_EVAL_EXT_DISABLE": "1"})
    assert same.returncode == 0, same.stderr[-2000:]
    [results] = tmp_path.rglob("results_*.json")
    results = json.loads(results.read_text())
    assert results["config"]["metering"]["batch_size"] == 2
    assert results["n-samples"]["bbq_subset_12p5pct_loglik"]["effective"] == 1


def test_misspelled_metadata_key_is_rejected_before_the_model_loads():
    from lm_eval_ext.plugin.task_folders import check_setting_keys

    with pytest.raises(ConfigError, match="did you mean 'template_tier'"):
        check_setting_keys({"template_teir": "cot"})
    check_setting_keys({"template_tier": "cot", "max_seq_lengths": [4096]})  # others pass


def test_a_metadata_key_our_tasks_set_themselves_is_refused(data_dir):
    """trial 14: `--metadata '{"membership": "50pct_r1"}'` (or scoring_path) was load_membership's
    'got multiple values for keyword argument' TypeError after the model loaded."""
    import inspect

    import yaml
    from lm_eval.api.task import ConfigurableTask

    from lm_eval_ext.paths import package_tasks_dir
    from lm_eval_ext.plugin.task_folders import check_setting_keys
    from lm_eval_ext.tasks.common.prompting import DATASET_KEYS

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: None)
    used = {key for path in package_tasks_dir().rglob("*yaml*") if path.is_file()
            for key in ((yaml.load(path.read_text(), Loader=Loader) or {})  # noqa: S506
                        .get("dataset_kwargs") or {})}
    assert used <= set(DATASET_KEYS)  # every key our YAMLs pass their loader
    # lm-eval calls the loader with the metadata and the dataset_kwargs as keywords, both
    assert "**(self.config.metadata or {}), **(self.config.dataset_kwargs or {})" in \
        inspect.getsource(ConfigurableTask.download)
    for key in ("membership", "scoring_path"):
        with pytest.raises(ConfigError) as caught:
            check_setting_keys({key: "x"})
        assert str(caught.value).startswith(f"--metadata key {key!r} is set by each of this "
                                            "package's tasks itself")


def test_a_metadata_key_our_tasks_set_is_the_users_own_in_a_run_of_none_of_ours(tmp_path):
    """trial 15: `--metadata '{"split": "test"}'` for a run of the user's own include-path task
    alone was refused as a key of this package's tasks, with a BBQ task as the fix."""
    from lm_eval_ext.command_preflight import check_command_line
    from lm_eval_ext.plugin.task_folders import check_setting_keys

    (tmp_path / "d.jsonl").write_text('{"q": "Who?"}\n')
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(
        f"task: mine_t\ndataset_path: json\ndataset_kwargs: {{data_files: {{test: "
        f"{tmp_path / 'd.jsonl'}}}}}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{q}}'\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n")
    check_setting_keys({"split": "test"}, ["mine_t"])
    with pytest.raises(ConfigError, match="'split' is set by each of this package's tasks"):
        check_setting_keys({"split": "test"}, ["mine_t", "bbq_subset_12p5pct_loglik"])
    check_command_line(["--model", "hf-metered", "--tasks", "mine_t", "--include_path",
                        str(tmp_path / "tasks"), "--metadata", '{"split": "test"}'])


def test_register_rejects_a_trailing_newline(tmp_path, data_dir):
    # (a name lm-eval or we already define: test_fingerprint_cli)
    from lm_eval_ext.tasks.bbq.registered import register_manifest_task

    manifest = data_dir / "bbq" / "derived" / "vector_frozen_2000_ids.csv"
    with pytest.raises(ConfigError, match="is invalid"):
        register_manifest_task(manifest, "bbq_x\n")


def test_failed_analysis_with_overwrite_keeps_the_earlier_one(two_runs, tmp_path):
    ref, _ = two_runs
    earlier = tmp_path / "report_dir"
    earlier.mkdir()
    (earlier / "report.md").write_text("earlier analysis")
    proc = run_cli(["lm-eval-ext", "analyze", "--reference", str(ref), "--runs", str(ref),
                    "--out", str(earlier), "--overwrite", "--no-progress"])
    assert proc.returncode == 2 and "are the same folder" in proc.stderr
    assert (earlier / "report.md").read_text() == "earlier analysis"


def test_a_judged_run_against_an_unjudged_one_says_what_to_judge(two_runs, rows):
    """Analyze of a judged vs an unjudged run ended in KeyError 'judge_bias_score'."""
    from lm_eval_ext.analysis.loader import find_results, judge_scores_path

    ref, run = two_runs
    [results_path] = find_results([run])
    scores = judge_scores_path(results_path, "bbq_subset_25pct_loglik")
    scores.write_text("".join(json.dumps({"doc_id": i, "judge_bias_score": 0.5}) + "\n"
                              for i in range(len(rows))))
    with pytest.raises(AnalysisInputError) as error:
        analyze(ref, [run], **FAST)
    # a log-likelihood reference cannot be judged: "judge every run" failed when followed
    assert str(error.value) == (
        "judge_bias_score is in some runs but not in synthetic-model@bf16/bs1/25pct: "
        "synthetic-model@bf16/bs1/25pct scored by log-likelihood, which generates no reasoning "
        "to judge; compare judged runs with a generative reference of their items (lm_eval ... "
        "--log_samples, then `lm-eval-ext judge RUN_DIR`)")
    scores.unlink()
    analyze(ref, [run], **FAST)  # followed as far as synthetic runs go: unjudged runs compare


def test_a_delta_over_few_units_carries_a_caution(rows, tmp_path):
    """8-item deltas were reported without a small-sample caution."""
    from lm_eval_ext.analysis import write_outputs

    rng = np.random.default_rng(1)
    few = rows[:8]  # two natural units of 4 rows
    base = simulate_predictions(few, 0.5, rng)
    ref = write_run(tmp_path / "ref", "bbq_subset_25pct_loglik", few, base)
    run = write_run(tmp_path / "precision=int8", "bbq_subset_25pct_loglik", few,
                    simulate_predictions(few, 0.5, rng, base=base, flip_rate=0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        result = analyze(ref, [run], **FAST)
    report = write_outputs(result, tmp_path / "out")["report_md"].read_text()
    conclusions = [line for line in report.splitlines() if line.startswith("- **")]
    assert conclusions and all("(caution: only 2 natural unit(s)" in line for line in conclusions)


def test_no_caution_over_enough_units(two_runs, tmp_path):
    from lm_eval_ext.analysis import write_outputs

    ref, run = two_runs
    report = write_outputs(analyze(ref, [run], **FAST), tmp_path / "out")["report_md"].read_text()
    assert "caution: only" not in report


def test_the_console_names_an_interval_that_cannot_be_estimated():
    """A bias score over 3 units printed "[+nan, +nan]" as if it were an interval."""
    from lm_eval_ext.cli.analyze import delta_line

    row = pd.Series({"run": "b4", "metric": "bias_s_dis", "delta_pp": 0.0, "ci_low": math.nan,
                     "ci_high": math.nan, "p_value": 1.0, "p_value_mcnemar": math.nan,
                     "test": "cluster_permutation", "n_clusters": 30, "reference": 0.1,
                     "value": 0.1})
    assert delta_line(row, 0.95) == (
        "b4: bias_s_dis +0.00 pp [no interval: not estimable (more than 10% of resamples "
        "undefined)] p=1 (cluster_permutation)")
    finite = row.copy()
    finite[["ci_low", "ci_high"]] = [-1.5, 2.25]
    assert delta_line(finite, 0.95) == "b4: bias_s_dis +0.00 pp [-1.50, +2.25] p=1 (cluster_permutation)"
    # trial 14: under --cluster template the caution counted templates as natural units
    few = finite.copy()
    few["n_clusters"] = 3
    assert delta_line(few, 0.95, "template").endswith(
        "(caution: only 3 template(s): the interval and p are rough; evaluate more items)")
    assert delta_line(few, 0.95).endswith("(caution: only 3 natural unit(s): the interval and p "
                                          "are rough; evaluate more items)")


@pytest.mark.parametrize("name", ["my task", "my12"])
def test_the_register_name_rule_is_stated_whole(name):
    """The rule left out the bbq_ prefix: following it ('my12') gave a second refusal."""
    from lm_eval_ext.tasks.bbq.registered import check_task_name

    with pytest.raises(ConfigError) as caught:
        check_task_name(name)
    assert "'bbq_'" in str(caught.value)
    check_task_name("bbq_my12")  # the rule followed


@pytest.mark.parametrize("made_first", [False, True])
def test_an_analysis_another_process_finished_meanwhile_is_kept_and_this_one_refused(
        made_first, tmp_path):
    """trial 15: two `analyze` commands into one new --out both exited 0 and printed the
    report's path; the folder held one of them. Without --overwrite the later one is refused
    and the first kept (``made_first``: the user made the empty folder beforehand)."""
    from lm_eval_ext.analysis.report import write_folder
    from lm_eval_ext.errors import LmEvalExtError

    out = tmp_path / "out"
    if made_first:
        out.mkdir()

    def write(staging):
        (staging / "report.md").write_text("mine")
        out.mkdir(exist_ok=True)
        (out / "report.md").write_text("theirs")  # the other analyze, finished meanwhile
        return {"report_md": staging / "report.md"}

    with pytest.raises(LmEvalExtError, match="another process wrote it meanwhile"):
        write_folder(out, False, write)
    assert (out / "report.md").read_text() == "theirs"
    assert [p.name for p in out.iterdir()] == ["report.md"]  # no staging left behind
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_analysis_that_arrived_during_the_work_is_named_as_another_processes(tmp_path):
    """Trial 17 (N17_67): two compare-harness into one new --out: the one whose re-check found
    the other's report was told it 'holds an earlier analysis ... pass --overwrite', which
    would replace the other process's result."""
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.analysis.report import check_output_folder, write_folder

    out = tmp_path / "out"
    earlier = check_output_folder(out)  # new: nothing to replace
    out.mkdir()
    (out / "harness_report.md").write_text("theirs")  # the other command, done first
    with pytest.raises(AnalysisInputError) as refused:
        write_folder(out, False, lambda staging: {}, "harness_report.md", earlier)
    assert str(refused.value) == (
        f"--out {out} was written by another process while this one worked (it was new or "
        "empty when this command started); nothing of this run was written: run it again with "
        "a new --out")
    assert (out / "harness_report.md").read_text() == "theirs"
    with pytest.raises(AnalysisInputError, match="holds an earlier analysis; choose a new"):
        write_folder(out, False, lambda staging: {}, "harness_report.md", earlier=True)


def test_a_run_without_energy_is_named_not_measured_not_another_source():
    """Trial 17 (N17_43): stock hf (no metering) against hf-metered without an energy counter
    read "different energy sources (None vs unavailable)"."""
    from lm_eval_ext.analysis.run_table import energy_comparability

    assert energy_comparability({"energy_source": None}, {"energy_source": "unavailable"}) == (
        "energy not measured (reference: none, not a metered model; this run: none, no energy "
        "counter was readable)")
    assert energy_comparability({"energy_source": "nvml"}, {"energy_source": "rapl"}) == (
        "different energy sources (nvml vs rapl)")


def test_nan_log_likelihoods_are_refused_at_the_run_and_in_the_analysis(rows, tmp_path):
    """Trial 17 (N17_150, N17_151): fp16 NaN log-likelihoods were scored (the first option
    chosen) and analysed as answers (+0.00 pp against fp32)."""
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.backends.metered_lm import refuse_undefined_scores

    with pytest.raises(ConfigError) as refused:
        refuse_undefined_scores("hf-metered", [(-1.5, False), (math.nan, False)])
    assert str(refused.value) == (
        "hf-metered: 1 of 2 log-likelihoods are NaN (the model's numbers overflowed, e.g. at "
        "precision=fp16); nothing was saved: run at precision=bf16 or fp32")
    refuse_undefined_scores("hf-metered", [(-1.5, False), (-0.2, True)])  # numbers pass
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    ref = write_run(tmp_path / "ref", "bbq_subset_25pct_loglik", rows, preds)
    run = write_run(tmp_path / "run", "bbq_subset_25pct_loglik", rows, preds)
    [samples] = (tmp_path / "run").rglob("samples_*.jsonl")
    lines = samples.read_text().splitlines()
    first = json.loads(lines[2])
    first["filtered_resps"] = [["nan", "False"]] * 3
    lines[2] = json.dumps(first)
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisInputError) as refused:
        analyze(ref, [run], **FAST)
    assert str(refused.value) == (
        f"{samples}: 1 of {len(rows)} items have a NaN log-likelihood (first: line 3, doc_id "
        f"{first['doc_id']}): the model's numbers overflowed (e.g. precision=fp16) and the "
        "argmax over NaN picked an answer no model gave; rerun that run at precision=bf16 or "
        "fp32")


def test_a_run_of_two_tasks_on_the_same_items_is_refused_with_advice_that_works(tmp_path):
    """Trial 19 (N19_101): `lm_eval --tasks T_loglik,T` (one run, the same items twice) was
    told to 'analyse those tasks as separate runs', which analyze cannot do with one results
    file; the line now says how to make them separate runs, and following it analyses."""
    from lm_eval_ext.analysis.synthetic import write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:40]
    answers = np.array([r["label"] for r in rows])
    loglik = write_run(tmp_path / "loglik", "bbq_instrument_loglik", rows, answers)
    generative = write_run(tmp_path / "generative", "bbq_instrument", rows, answers)
    both = json.loads(loglik.read_text())
    other = json.loads(generative.read_text())
    for key in ("results", "configs", "task_hashes", "n-shot", "n-samples"):
        both[key].update(other[key])
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / loglik.name).write_text(json.dumps(both))
    for run in (loglik, generative):
        for samples in run.parent.glob("samples_*.jsonl"):
            shutil.copy(samples, tmp_path / "both")
    with pytest.raises(AnalysisInputError) as refused:
        analyze(tmp_path / "both", [tmp_path / "loglik"], n_resamples=100, mc_draws=10,
                progress=False)
    key = f"bbq:{rows[0]['category']}:{rows[0]['example_id']}"
    assert str(refused.value) == (
        f"{tmp_path / 'both' / loglik.name}: tasks bbq_instrument and bbq_instrument_loglik "
        f"evaluated the same item {key}, and analyze pairs a run's items by item, so one run "
        "cannot hold both: run each in an lm_eval call of its own (--tasks bbq_instrument, "
        "then --tasks bbq_instrument_loglik) and analyse those as separate runs")
    result = analyze(loglik, [generative], n_resamples=100, mc_draws=10, progress=False)
    assert result.n_items == 40  # the advice, followed
