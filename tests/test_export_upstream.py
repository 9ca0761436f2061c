"""export-upstream: self-contained lm-eval task folders that give our tasks' per-item results."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import package_task_manager, run_cli

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.export.upstream import export_upstream


def _load_like_lm_eval(path: Path):
    """Execute a utils.py the way lm-eval does: not registered in sys.modules while it runs."""
    spec = importlib.util.spec_from_file_location(str(path.with_suffix("")), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("upstream")
    export_upstream(["bbq_subset_12p5pct", "xstest_ext"], out, local_data=True)
    return out


def test_exported_utils_need_the_standard_library_only(exported):
    for utils in exported.glob("*/utils.py"):
        tree = ast.parse(utils.read_text())
        roots = {alias.name.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.Import) for alias in node.names}
        roots |= {node.module.split(".")[0] for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom)}
        assert roots and roots <= set(sys.stdlib_module_names), (utils, roots)
        _load_like_lm_eval(utils)  # importable the way lm-eval imports it


def test_exported_bbq_prompt_equals_ours_on_every_bbq_row(exported):
    from lm_eval_ext.data.bbq import load_bbq_rows
    from lm_eval_ext.tasks.bbq.utils import ITEMS

    utils = _load_like_lm_eval(exported / "bbq_ext_12p5pct" / "utils.py")
    rows = load_bbq_rows()
    assert len(rows) == 58_492
    mismatched = [r["item_key"] for r in rows
                  if utils.render(r) != ITEMS.prepare(r, "detailed", "generative")["prompt"]]
    assert mismatched == []
    items = (exported / "bbq_ext_12p5pct" / "bbq_ext_12p5pct_items.csv").read_text()
    assert items.splitlines()[0] == "category,example_id,unit_id,target_loc,unknown_loc"
    assert len(items.splitlines()) == 1 + 248  # ids and indices only, no benchmark text
    assert "context" not in items and "question" not in items


def test_unknown_task_is_refused_with_the_exportable_ones(tmp_path):
    with pytest.raises(ConfigError, match="exportable: bbq_instrument"):
        export_upstream(["bbq_subset_12p5pct_loglik"], tmp_path)


def _samples(out: Path, task: str) -> dict[str, dict]:
    [path] = out.rglob(f"samples_{task}_20*.jsonl")  # not {task}_v2
    return {s["doc"]["item_key"]: s for s in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
def test_exported_folders_validate_and_match_our_tasks_item_by_item(exported, tmp_path,
                                                                    embedded_checkpoint):
    tasks = "bbq_ext_12p5pct,xstest_ext_v2"
    check = run_cli(["lm_eval", "validate", "--tasks", tasks, "--include_path", str(exported)])
    assert check.returncode == 0 and "All tasks found and valid" in check.stdout, check.stdout
    result = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                      "idle_seconds=0", "--tasks", f"{tasks},bbq_subset_12p5pct,xstest_ext",
                      "--include_path", str(exported), "--limit", "2", "--output_path",
                      str(tmp_path), "--log_samples",
                      "--gen_kwargs", "max_gen_toks=32"],  # the same override for both sides
                     timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for ours, theirs in (("bbq_subset_12p5pct", "bbq_ext_12p5pct"),
                         ("xstest_ext", "xstest_ext_v2")):
        a, b = _samples(tmp_path, ours), _samples(tmp_path, theirs)
        assert list(a) == list(b) and len(a) == 2  # the same first items, in the same order
        for key in a:
            assert a[key]["arguments"] == b[key]["arguments"]  # the same prompt and settings
            assert a[key]["resps"] == b[key]["resps"]
            assert a[key]["filtered_resps"] == b[key]["filtered_resps"]
            metrics = [m for m in a[key]["metrics"]]
            assert metrics == b[key]["metrics"]
            assert [a[key][m] for m in metrics] == [b[key][m] for m in metrics]


def test_an_earlier_export_is_replaced_only_on_request_and_whole(tmp_path, data_dir, capsys):
    """--out over an export overwrote it, stray files survived, and a cot export
    reused the detailed export's task name."""
    from lm_eval_ext.cli.main import main

    out = tmp_path / "out"
    assert main(["export-upstream", "xstest_ext", "--out", str(out), "--local-data"]) == 0
    stray = out / "xstest_ext_v2" / "notes.txt"
    stray.write_text("mine")
    capsys.readouterr()
    assert main(["export-upstream", "xstest_ext", "--out", str(out), "--local-data"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: export-upstream: {out} already holds xstest_ext_v2 (an earlier "
        "export); pass --overwrite to replace it, or choose another --out")
    assert stray.exists()
    assert main(["export-upstream", "xstest_ext", "--out", str(out), "--local-data",
                 "--overwrite"]) == 0
    assert not stray.exists()  # replaced whole
    assert main(["export-upstream", "xstest_ext", "--out", str(out), "--local-data",
                 "--template-tier", "cot"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["xstest_ext_v2", "xstest_ext_v2_cot"]
    yaml_text = (out / "xstest_ext_v2_cot" / "xstest_ext_v2_cot.yaml").read_text()
    assert "task: xstest_ext_v2_cot" in yaml_text and "template_tier: cot" in yaml_text
    # a bad task anywhere in the list: refused before anything is written
    assert main(["export-upstream", "bbq_subset_25pct", "bbq_subset_25pct_loglik", "--out",
                 str(tmp_path / "none")]) == 2
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_a_web_data_export_run_offline_is_one_line_naming_local_data(tmp_path,
                                                                     embedded_checkpoint):
    """Run offline, an export that reads its data from the web ended in a datasets traceback,
    and nothing the export printed named --local-data."""
    out = tmp_path / "tasks"
    export = run_cli(["lm-eval-ext", "export-upstream", "bbq_subset_12p5pct", "--out", str(out)])
    assert export.returncode == 0, export.stderr
    assert export.stdout.splitlines()[-1] == ("data: read from the web when the task runs; for "
                                              "offline runs export again with --local-data")
    result = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                      "idle_seconds=0", "--tasks", "bbq_ext_12p5pct", "--include_path", str(out),
                      "--limit", "1"], env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "lm-eval-ext: error: a task's data file could not be fetched ('https://raw.githubuserco"
        "ntent.com/nyu-mll/BBQ/bea11bd97d79217245b5871acd247b9d6eb24598/data/Age.jsonl'): the "
        "web cannot be reached from here; a task from `lm-eval-ext export-upstream` reads "
        "local files when exported with --local-data")


def test_a_module_that_needs_more_than_the_standard_library_is_not_vendored():
    """The guard for maintainers: an exported folder must run on lm-eval alone."""
    from lm_eval_ext.export.vendoring import vendored_utils

    with pytest.raises(ConfigError) as err:
        vendored_utils(["lm_eval_ext.analysis.stats.equivalence"], {}, "x")
    assert str(err.value) == ("lm_eval_ext.analysis.stats.equivalence imports numpy: an exported "
                              "utils.py may use the standard library only")


@pytest.mark.parametrize(("ours", "theirs"), [("bbq_subset_12p5pct", "bbq_ext_12p5pct"),
                                              ("xstest_ext", "xstest_ext_v2")])
def test_an_exported_tasks_shots_are_our_pool_not_its_items(exported, ours, theirs):
    """Trial 17 (N17_147): `--num_fewshot 2` on an exported BBQ task drew two of its own
    evaluated items as shots, gold answers shown; ours draws a pool outside the instrument."""
    from lm_eval.tasks.manager import TaskManager

    from lm_eval_ext.lm_eval_inputs import our_task_manager

    mine = our_task_manager().load([ours])["tasks"][ours]
    upstream = TaskManager(include_path=str(exported)).load([theirs])["tasks"][theirs]
    for task in (mine, upstream):
        task.set_config(key="num_fewshot", value=2)
    first = upstream.test_docs()[0]
    context = upstream.fewshot_context(first, 2)
    assert context == mine.fewshot_context(mine.test_docs()[0], 2)  # lm-eval builds both
    evaluated = {doc["prompt"] for doc in upstream.test_docs()}
    shots = [shot["prompt"] for shot in upstream.fewshot_docs()[:2]]
    assert len(shots) == 2 and all(shot in context and shot not in evaluated for shot in shots)


def test_an_export_carries_our_tasks_version_and_says_to_apply_the_chat_template(exported):
    """Trial 18 (N18_109, N18_160): exports of the old and the new few-shot pool were both
    version 1.0, and stock `lm_eval --model hf` without --apply_chat_template gave 100% parse
    failures where our task gave 50%, with no word of the switch in the README."""
    import yaml

    task_manager = package_task_manager()
    for ours, theirs in (("bbq_subset_12p5pct", "bbq_ext_12p5pct"),
                         ("xstest_ext", "xstest_ext_v2")):
        task = task_manager.load([ours])["tasks"][ours]
        text = (exported / theirs / f"{theirs}.yaml").read_text()
        exported_yaml = yaml.safe_load(text.replace("!function", ""))
        assert exported_yaml["metadata"]["version"] == task.config.metadata["version"]
        readme = (exported / theirs / "README.md").read_text()
        assert "run it with\n  `--apply_chat_template`" in readme
    # trial 19 (N19_11): the README said over-refusal "on the 250 safe prompts" (the source's
    # count); 5 of them are the few-shot pool, so 245 are evaluated (docs/tasks.md)
    readme = " ".join((exported / "xstest_ext_v2" / "README.md").read_text().split())
    assert "over-refusal on the 245 safe prompts evaluated" in readme
