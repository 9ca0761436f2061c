"""No item scored twice when its answer cannot change (``answers_from``).

The real runs are the embedded model at batch 1: a parent on the instrument's first 32 items,
children on subsets whose first items lie inside them (the 75% membership's first 24, the 50%
membership's first 8: the order is checked against the data in ``tests/test_campaign.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import meter_for, run_cli, save_lm_eval_run

from lm_eval_ext.backends.derived_answers import draw_recheck, recheck_count
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.metering import InferenceLedger
from lm_eval_ext.metering.derived import DERIVED_FLAG, DerivedEnergy

PARENT_TASK, PARENT_LIMIT = "bbq_instrument_loglik", 32
CHILD_TASK, CHILD_LIMIT = "bbq_subset_75pct_loglik", 24
#: a parent task's entry as config.metering.per_task holds it (a 2,000-item GPU run)
PARENT_ENTRY = {"inference_seconds": 100.0, "forward_seconds": 80.0, "energy_joules": 2000.0,
                "energy_joules_idle_corrected": 1500.0, "energy_joules_idle_corrected_se": 4.0,
                "idle_joules": 500.0, "flags": ["other_processes"]}


def test_a_derived_task_costs_the_parents_per_item_values_and_its_recheck_is_in_no_total():
    # counter (mJ) and clock at each edge: task "m" measured 0 -> 400 J over 2 s; "d"'s
    # re-check 400 -> 450 J over 1 s; "r"'s re-check 450 -> 470 J, then "r" in full 470 -> 670 J
    meter, _ = meter_for({"idx0": [0, 400_000, 400_000, 450_000, 450_000, 470_000, 470_000,
                                   670_000]}, [0.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 6.0])
    ledger = InferenceLedger(meter)
    with ledger.measure("m", "loglikelihood", 30):
        pass
    with ledger.measure("d", "loglikelihood", 30, recheck=True):
        pass
    ledger.derive("d", "loglikelihood", DerivedEnergy(PARENT_ENTRY, 2000, 500, 1500))
    with ledger.measure("r", "loglikelihood", 3, recheck=True):
        pass
    with ledger.measure("r", "loglikelihood", 9):  # refused: the whole task for real
        pass
    summary = ledger.summary()
    derived, refused = summary["per_task"]["d"], summary["per_task"]["r"]
    # 2,000 J over 2,000 items, 500 items: 500 J; 1,500 J idle-corrected: 375 J; 100 s: 25 s
    assert (derived["energy_joules"], derived["energy_joules_idle_corrected"],
            derived["inference_seconds"], derived["forward_seconds"]) == (500.0, 375.0, 25.0, 20.0)
    assert derived["idle_share"] == 0.25
    # a derived entry states no interval of its own: its SEs are null
    assert (derived["energy_joules_se"], derived["inference_seconds_se"],
            derived["energy_joules_idle_corrected_se"]) == (None, None, None)
    assert derived["flags"] == [DERIVED_FLAG, "other_processes"]
    assert (derived["n_requests"], derived["windows"]) == (1500, 0)
    assert derived["request_types"]["loglikelihood"]["energy_joules"] == 500.0
    recheck = derived["measured_recheck"]
    assert (recheck["energy_joules"], recheck["inference_seconds"], recheck["n_requests"]) == (
        pytest.approx(50.0), 1.0, 30)
    # the refused task: its full run only; its re-check kept beside it
    assert refused["energy_joules"] == pytest.approx(200.0) and DERIVED_FLAG not in refused["flags"]
    assert refused["measured_recheck"]["energy_joules"] == pytest.approx(20.0)
    total = summary["total"]
    assert total["energy_joules"] == pytest.approx(400.0 + 500.0 + 200.0)  # no re-check in it
    assert total["inference_seconds"] == pytest.approx(2.0 + 25.0 + 2.0)
    assert total["n_requests"] == 30 + 1500 + 9 and DERIVED_FLAG in total["flags"]


def test_the_recheck_sample_size_and_draw():
    assert [recheck_count(n, 0.05) for n in (8, 10, 28, 248, 2000)] == [8, 10, 10, 13, 100]
    assert recheck_count(500, 1.0) == 500
    docs = list(range(248))
    draw = draw_recheck(docs, 0.05, "0", "bbq_subset_12p5pct_loglik")
    assert len(draw) == 13 and list(draw) == sorted(set(draw)) and set(draw) <= set(docs)
    assert draw == draw_recheck(docs[::-1], 0.05, "0", "bbq_subset_12p5pct_loglik")  # seeded
    assert draw != draw_recheck(docs, 0.05, "1", "bbq_subset_12p5pct_loglik")
    assert draw != draw_recheck(docs, 0.05, "0", "bbq_subset_12p5pct_r2_loglik")


# -- real runs of the embedded model ---------------------------------------------------------

def _results(folder: Path) -> Path:
    [path] = folder.rglob("results_*.json")
    return path


def _samples(folder: Path, task: str) -> dict[int, dict]:
    [path] = folder.rglob(f"samples_{task}_*.jsonl")
    return {s["doc_id"]: s for s in map(json.loads, path.read_text().splitlines())}


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _run(folder: Path, task: str, limit: int, model_args: str = "") -> Path:
    save_lm_eval_run("hf-metered", task, limit, folder, batch_size=1, device=_device(),
                     model_args=",".join(a for a in ("idle_seconds=0", model_args) if a))
    return folder


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """The measured parent: the instrument's first 32 items at batch 1."""
    return _results(_run(tmp_path_factory.mktemp("parent") / "run", PARENT_TASK, PARENT_LIMIT))


def _copy(parent: Path, folder: Path) -> Path:
    """A copy of the parent's output folder; its results file."""
    shutil.copytree(parent.parent, folder)
    return folder / parent.name


def _edit(results: Path, change) -> None:
    payload = json.loads(results.read_text())
    change(payload)
    results.write_text(json.dumps(payload))


@pytest.fixture(scope="module")
def metered_parent(parent, tmp_path_factory) -> Path:
    """The parent with joules in its task entry (this CPU has no energy counter)."""
    copy = _copy(parent, tmp_path_factory.mktemp("metered") / "run")

    def joules(payload):
        payload["config"]["metering"]["per_task"][PARENT_TASK].update(
            energy_joules=640.0, energy_joules_idle_corrected=480.0, idle_joules=160.0)
    _edit(copy, joules)
    return copy


@pytest.fixture(scope="module")
def derived_and_real(metered_parent, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("child")
    derived = _run(root / "derived", CHILD_TASK, CHILD_LIMIT, f"answers_from={metered_parent}")
    return derived, _run(root / "real", CHILD_TASK, CHILD_LIMIT)


@pytest.mark.slow
def test_a_derived_subset_equals_a_real_run_of_it(derived_and_real, metered_parent):
    derived, real = derived_and_real
    ours, theirs = _samples(derived, CHILD_TASK), _samples(real, CHILD_TASK)
    assert len(ours) == CHILD_LIMIT and set(ours) == set(theirs)
    for doc_id, sample in ours.items():
        assert sample["resps"] == theirs[doc_id]["resps"], doc_id
        assert {k: sample[k] for k in ("acc", "acc_norm")} == {
            k: theirs[doc_id][k] for k in ("acc", "acc_norm")}
    results = [json.loads(_results(f).read_text()) for f in (derived, real)]
    assert results[0]["results"] == results[1]["results"]
    assert results[0]["config"]["responses"] == results[1]["config"]["responses"]
    record = results[0]["config"]["metering"]["derived"][CHILD_TASK]
    assert record["derived"] and record["derivation_refused"] is None
    assert (record["from_results"], record["from_task"], record["from_items"]) == (
        str(metered_parent.resolve()), PARENT_TASK, PARENT_LIMIT)
    # 24 items: 5% is 2, so the floor of 10 items is re-run (3 requests each), all equal
    assert (record["items"], record["rechecked_items"], record["matched_items"]) == (24, 10, 10)
    assert len(record["rechecked_doc_ids"]) == 10 and record["recheck_seed"] == "0"
    recheck = results[0]["config"]["metering"]["per_task"][CHILD_TASK]["measured_recheck"]
    assert recheck["n_requests"] == 30 and recheck["inference_seconds"] > 0
    assert "derived" not in results[1]["config"]["metering"]


@pytest.mark.slow
def test_derived_energy_is_the_parents_joules_per_item_times_items(derived_and_real):
    metering = json.loads(_results(derived_and_real[0]).read_text())["config"]["metering"]
    task = metering["per_task"][CHILD_TASK]
    # the parent: 640 J (480 J idle-corrected) over 32 items; the child: 24 items
    assert (task["energy_joules"], task["energy_joules_idle_corrected"]) == (
        640.0 / 32 * 24, 480.0 / 32 * 24)
    assert (metering["energy_joules"], metering["energy_joules_idle_corrected"]) == (480.0, 360.0)
    assert DERIVED_FLAG in task["flags"] and DERIVED_FLAG in metering["flags"]
    record = metering["derived"][CHILD_TASK]
    assert (record["from_energy_joules"], record["parent_joules_per_item"],
            record["derived_energy_joules"], record["derived_energy_joules_idle_corrected"]) == (
        640.0, 20.0, 480.0, 360.0)
    assert record["recheck_energy_joules"] is None  # the re-check's own reading: no counter here


def _tamper(parent: Path, folder: Path, membership: str, doc: int) -> dict:
    """A copy of the parent whose answer to ``membership``'s item ``doc`` (its first request) is
    moved by 0.001; the untouched answers by (context, continuation)."""
    from lm_eval_ext.data.instrument import load_membership

    item = load_membership(membership).rows[doc]
    copy = _copy(parent, folder)
    [samples_path] = copy.parent.glob(f"samples_{PARENT_TASK}_*.jsonl")
    lines = [json.loads(line) for line in samples_path.read_text().splitlines()]
    [target] = [s for s in lines if (s["doc"]["category"], s["doc"]["example_id"])
                == (item["category"], item["example_id"])]
    original = {(a["arg_0"], a["arg_1"]): list(r[0]) for s in lines
                for a, r in zip(s["arguments"].values(), s["resps"], strict=True)}
    target["resps"][0][0][0] = str(float(target["resps"][0][0][0]) - 0.001)
    samples_path.write_text("".join(json.dumps(s) + "\n" for s in lines))
    return {"results": copy, "original": original}


def _answers_are_the_parents(folder: Path, task: str, original: dict) -> None:
    """Every answer of the run equals the untouched parent's for the same strings."""
    for sample in _samples(folder, task).values():
        for args, resps in zip(sample["arguments"].values(), sample["resps"], strict=True):
            assert resps[0] == original[(args["arg_0"], args["arg_1"])]


@pytest.mark.slow
def test_a_parent_with_a_changed_answer_makes_the_cell_run_in_full(parent, tmp_path, capsys):
    # the re-check draws 10 of the 24 items; the parent's answer to the first drawn is changed
    drawn = draw_recheck(list(range(CHILD_LIMIT)), 0.05, "0", CHILD_TASK)
    tampered = _tamper(parent, tmp_path / "tampered", "75pct", drawn[0])
    capsys.readouterr()
    child = _run(tmp_path / "child", CHILD_TASK, CHILD_LIMIT,
                 f"answers_from={tampered['results']}")
    # the console says so (trial 19, N19_108: only config.metering.derived did)
    assert (f"[answers_from] {CHILD_TASK}: measured, not derived: 1 of 10 re-checked items "
            f"differ from the parent (first: doc {drawn[0]}") in capsys.readouterr().err
    metering = json.loads(_results(child).read_text())["config"]["metering"]
    record = metering["derived"][CHILD_TASK]
    assert not record["derived"] and list(drawn) == record["rechecked_doc_ids"]
    assert (record["rechecked_items"], record["matched_items"]) == (10, 9)
    assert record["derivation_refused"].startswith(
        f"1 of 10 re-checked items differ from the parent (first: doc {drawn[0]}, request 0")
    assert record["derivation_refused"].endswith("; the task ran in full")
    entry = metering["per_task"][CHILD_TASK]
    assert DERIVED_FLAG not in entry["flags"] and DERIVED_FLAG not in metering["flags"]
    assert entry["n_requests"] == 3 * CHILD_LIMIT  # the whole task, in its own window
    assert entry["measured_recheck"]["n_requests"] == 3 * 10  # the re-check, beside it
    _answers_are_the_parents(child, CHILD_TASK, tampered["original"])


@pytest.mark.slow
def test_a_recheck_of_every_item_is_the_task_measured_once(parent, tmp_path):
    task, limit = "bbq_subset_50pct_loglik", 8  # fewer than 10 items: all are re-run
    tampered = _tamper(parent, tmp_path / "tampered", "50pct", 0)
    child = _run(tmp_path / "child", task, limit, f"answers_from={tampered['results']}")
    metering = json.loads(_results(child).read_text())["config"]["metering"]
    record = metering["derived"][task]
    assert not record["derived"] and (record["rechecked_items"], record["matched_items"]) == (8, 7)
    assert record["derivation_refused"].startswith(
        "every item was re-run (8 of 8): the task was measured; 1 of 8 re-checked items differ "
        "from the parent (first: doc 0, request 0")
    entry = metering["per_task"][task]
    assert entry["n_requests"] == 3 * limit and entry["windows"] == 1  # run once
    assert DERIVED_FLAG not in entry["flags"] and "measured_recheck" not in entry
    _answers_are_the_parents(child, task, tampered["original"])


def _refused(**model_args) -> str:
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    with pytest.raises(ConfigError) as error:
        HFMeteredLM(idle_seconds=0, device=_device(), **{"batch_size": 1, **model_args})
    return str(error.value)


@pytest.mark.slow
def test_a_parent_that_cannot_give_answers_is_refused_before_the_load(parent, tmp_path):
    where = f"hf-metered: answers_from={parent}"
    assert _refused(answers_from=str(parent), precision="bf16") == (
        f"{where}: model args differ from the parent's (precision: <absent> (parent) vs bf16 "
        "(this run)); run with the parent's model args, or without answers_from")
    assert _refused(answers_from=str(parent), batch_size=4) == (
        "hf-metered: answers_from needs --batch_size 1 (this run: 4); remove answers_from to "
        "run at 4")
    assert "recheck=0 must be in (0, 1]" in _refused(answers_from=str(parent), recheck=0)
    at_four = _copy(parent, tmp_path / "b4")
    _edit(at_four, lambda p: p["config"]["metering"].update(batch_size=4))
    assert "the parent ran at batch size 4; answers are batch-independent only at batch 1" in \
        _refused(answers_from=str(at_four))
    plain = _copy(parent, tmp_path / "hf")
    _edit(plain, lambda p: (p["config"].pop("hf_metered"), p["config"].update(model="hf")))
    assert "the parent ran 'hf', not hf-metered" in _refused(answers_from=str(plain))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(parent, bare / parent.name)
    assert f"task {PARENT_TASK}: no samples file" in _refused(answers_from=str(bare / parent.name))
    assert "x.json: no such file" in _refused(answers_from=str(tmp_path / "x.json"))
    (tmp_path / "x.json").write_text("{}")
    assert "not an lm-eval results_*.json file" in _refused(answers_from=str(tmp_path / "x.json"))
    other = _copy(parent, tmp_path / "weights")
    _edit(other, lambda p: p["config"]["hf_metered"]["embedded_model"].update(gguf_sha256="0"))
    assert "the parent ran other weights (embedded_model.gguf_sha256: '0' (parent) vs 'b179" \
        in _refused(answers_from=str(other))  # after the load, naming the field that differs


@pytest.mark.slow
def test_the_command_refuses_other_model_args_in_one_line(parent, tmp_path):
    done = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                    f"idle_seconds=0,precision=bf16,answers_from={parent}", "--tasks",
                    CHILD_TASK, "--limit", "2", "--batch_size", "1", "--output_path",
                    str(tmp_path / "out")])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "error" in line]
    assert "model args differ from the parent's (precision: <absent> (parent) vs bf16" in line


def _parent_file(folder: Path, config: dict, configs: dict) -> Path:
    """A hand-made parent results file (only what each check reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results_2026-01-01T00-00-00.000000.json"
    path.write_text(json.dumps({"config": {"model_args": "", "hf_metered": {
        "model_class": "hf-metered"}, **config}, "configs": configs}))
    return path


def test_a_parent_file_that_cannot_give_answers_is_one_line_before_any_load(tmp_path):
    """Each parent file mistake the check names, read with no model loaded."""
    from lm_eval_ext.backends.parent_run import load_parent, read_parent_results

    broken = tmp_path / "a" / "results_2026-01-01T00-00-00.000000.json"
    broken.parent.mkdir()
    broken.write_text("{not json")
    with pytest.raises(ConfigError) as caught:
        read_parent_results(broken, "hf-metered: answers_from=P")
    assert str(caught.value).startswith("hf-metered: answers_from=P: not readable (")
    assert str(caught.value).endswith("); pass the parent run's results file as lm-eval wrote it")
    broken.write_text("[]")
    with pytest.raises(ConfigError) as caught:
        read_parent_results(broken, "hf-metered: answers_from=P")
    assert str(caught.value) == ("hf-metered: answers_from=P: not an lm-eval results file (no "
                                 "config and configs); pass the parent run's results_*.json")

    def refused(path: Path) -> str:
        with pytest.raises(ConfigError) as caught:
            load_parent(path, "hf-metered", {}, {"batch_size": 1})
        return str(caught.value)

    measured = "/runs/m0/results_2026-01-01T00-00-00.000000.json"
    derived = _parent_file(tmp_path / "d", {"metering": {"batch_size": 1, "derived": {
        "t": {"derived": True, "from_results": measured}}}}, {})
    assert refused(derived) == (f"hf-metered: answers_from={derived}: the parent's answers were "
                                f"themselves derived; pass answers_from={measured} (the measured "
                                "run)")
    configs = {PARENT_TASK: {"output_type": "multiple_choice"}}
    bare = _parent_file(tmp_path / "s", {"metering": {"batch_size": 1}}, configs)
    samples = bare.parent / f"samples_{PARENT_TASK}_2026-01-01T00-00-00.000000.jsonl"
    assert refused(bare) == (f"answers_from={bare.resolve()}: task {PARENT_TASK}: no samples file "
                             f"{samples.name} beside it; rerun the parent with --log_samples")
    samples.write_text("[1, 2, 3]\n")
    assert refused(bare) == (f"answers_from={bare.resolve()}: task {PARENT_TASK}: {samples.name} "
                             "line 1 is not an lm-eval loglikelihood sample (TypeError: list "
                             "indices must be integers or slices, not str); rerun the parent with "
                             "--log_samples")


@pytest.mark.parametrize(("config", "configs", "block"), [
    ({"metering": "fast"}, {}, "config.metering is a str"),
    ({"metering": {"batch_size": 1, "derived": [1]}}, {}, "config.metering.derived is a list"),
    ({"hf_metered": "x"}, {}, "config.hf_metered is a str"),
    ({"metering": {"batch_size": 1}}, [], "configs is a list"),
])
def test_a_parent_file_with_a_block_of_another_shape_is_one_line(config, configs, block, tmp_path):
    """trial 13: answers_from=<a results file whose config.metering is a string> was an
    AttributeError traceback from load_parent (analyze had the one line)."""
    from lm_eval_ext.backends.parent_run import load_parent

    path = _parent_file(tmp_path, config, configs)
    with pytest.raises(ConfigError) as caught:
        load_parent(path, "hf-metered", {}, {"batch_size": 1})
    assert str(caught.value) == (
        f"hf-metered: answers_from={path}: {block}, not the block hf-metered writes: the file "
        "was damaged after the run; pass the parent's own results file, or run the parent again")


def test_the_console_line_says_derived_from_what_and_how_it_was_rechecked():
    """Trial 19 (N19_108): a derivation's outcome was in config.metering.derived only."""
    from lm_eval_ext.backends.derived_answers import TaskDerivation

    derived = TaskDerivation(True, None, "/p/results.json", "bbq_a", 24, 10, 10, 0.05, "0", ())
    assert derived.line("bbq_b") == ("[answers_from] bbq_b: derived from bbq_a of "
                                     "/p/results.json (10 of 24 items re-run and matched)")
    refused = TaskDerivation(False, "4 of 12 requests are not in the parent (first: doc 8)",
                             "/p/results.json", None, 12, 0, 0, 0.05, "0", ())
    assert refused.line("bbq_b") == ("[answers_from] bbq_b: measured, not derived: 4 of 12 "
                                     "requests are not in the parent (first: doc 8)")
