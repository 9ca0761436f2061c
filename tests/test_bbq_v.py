"""BBQ-V on a synthetic BBQ-V-shaped fixture (drawn images) and a tiny offline VLM.

Real BBQ-V numbers need the gated data; these tests check the loader, the task, the
multimodal metered model and the per-item output on data of the same shape.
"""

import csv
import json

import pytest
from bbq_v_fixture import build_tiny_vlm, write_bbq_v_folder
from helpers import package_task_manager
from lm_eval import simple_evaluate

from lm_eval_ext.data.bbq_v import fingerprint, load_bbq_v
from lm_eval_ext.errors import ConfigError, DataCorruptError, DataMissingError
from lm_eval_ext.tasks.common.answer_parser import METHODS as PARSER_METHODS


@pytest.fixture(scope="module")
def bbq_v_dir(tmp_path_factory):
    return write_bbq_v_folder(tmp_path_factory.mktemp("data") / "bbq_v")


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory, embedded_checkpoint):
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-llava", embedded_checkpoint)


def test_folder_loads_with_scenarios_and_fingerprint(bbq_v_dir):
    rows = load_bbq_v(str(bbq_v_dir))
    assert len(rows) == 20 and len({r["unit_id"] for r in rows}) == 5
    assert {r["question_polarity"] for r in rows} == {"neg", "nonneg"}
    lines = sorted(f"{r['id']},{r['cross_id']},{r['unique_question_id']},{r['image_sha256']},"
                   f"{r['label']}\n" for r in rows)
    import hashlib
    assert fingerprint(rows) == hashlib.sha256("".join(lines).encode()).hexdigest()


def test_altered_image_is_rejected(bbq_v_dir, tmp_path):
    import shutil

    copy = tmp_path / "bbq_v"
    shutil.copytree(bbq_v_dir, copy)
    image = sorted((copy / "images").iterdir())[0]
    image.write_bytes(image.read_bytes() + b"x")
    with pytest.raises(DataCorruptError, match=f"{image.name}.*replace the image"):
        load_bbq_v(str(copy))


def test_scenario_without_both_polarities_is_rejected(bbq_v_dir, tmp_path):
    import shutil

    copy = tmp_path / "bbq_v"
    shutil.copytree(bbq_v_dir, copy)
    rows = list(csv.DictReader(open(copy / "sample.csv")))
    kept = [r for r in rows if not (r["unique_question_id"] == "Q1"
                                    and r["question_polarity"] == "nonneg")]
    with open(copy / "sample.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    with pytest.raises(DataCorruptError, match="scenario Q1 must hold exactly two cross_ids"):
        load_bbq_v(str(copy))


def test_missing_data_says_it_is_gated(tmp_path, monkeypatch):
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    with pytest.raises(DataMissingError, match="gated Hugging Face dataset.*HF_TOKEN"):
        load_bbq_v()


def test_datasets_repository_source(bbq_v_dir, tmp_path):
    """The hf_dataset path (gated repo with a token in real use), here a local parquet folder."""
    import datasets

    rows = list(csv.DictReader(open(bbq_v_dir / "sample.csv")))
    data = datasets.Dataset.from_list([
        {**{k: v for k, v in r.items() if k != "image_file"},
         "image": str(bbq_v_dir / "images" / r["image_file"])} for r in rows
    ]).cast_column("image", datasets.Image())
    (tmp_path / "repo").mkdir()
    data.to_parquet(tmp_path / "repo" / "train.parquet")
    loaded = load_bbq_v(hf_dataset=str(tmp_path / "repo"))
    assert len(loaded) == 20 and loaded[0]["image"].size == (64, 48)
    broken = data.remove_columns(["ans0"])
    (tmp_path / "open").mkdir()
    broken.to_parquet(tmp_path / "open" / "train.parquet")
    with pytest.raises(DataCorruptError, match="lacks ans0"):
        load_bbq_v(hf_dataset=str(tmp_path / "open"))


def test_multimodal_model_needs_pretrained(tiny_vlm):
    from lm_eval_ext.backends.hf.multimodal import HFMultimodalMeteredLM

    with pytest.raises(ConfigError, match="hf-multimodal-metered: pass --model_args "
                       "pretrained=<model> \\(there is no embedded default"):
        HFMultimodalMeteredLM(device="cpu")
    # the advice followed: with a model folder named, the arguments check out (loads nothing);
    # offline, a name that is no folder gets advice without the text-only packaged models
    own, _, _ = HFMultimodalMeteredLM.checked_args({"pretrained": str(tiny_vlm), "device": "cpu"})
    assert own.pretrained == str(tiny_vlm)
    with pytest.raises(ConfigError) as err:
        HFMultimodalMeteredLM.checked_args({"pretrained": "some/vlm"})
    assert str(err.value).endswith("hub is offline (HF_HUB_OFFLINE); pass a model folder")


@pytest.mark.slow
def test_real_run_on_the_tiny_vlm(bbq_v_dir, tiny_vlm):
    from lm_eval_ext.backends.hf.multimodal import HFMultimodalMeteredLM

    manager = package_task_manager(bbq_v_dir=str(bbq_v_dir))
    lm = HFMultimodalMeteredLM(pretrained=str(tiny_vlm), device="cpu", batch_size=4,
                               idle_seconds=0)
    results = simple_evaluate(model=lm, tasks=["bbq_v_ext"], task_manager=manager,
                              log_samples=True, bootstrap_iters=0, gen_kwargs="max_gen_toks=16")
    samples = results["samples"]["bbq_v_ext"]
    assert len(samples) == 12  # 20 rows minus the 2 held-out scenarios (4 rows each)
    for sample in samples:
        prompt = sample["arguments"][0][0]
        # logged as the task built it (hf-multimodal-metered templates a copy, see hf_metered)
        assert prompt.startswith("<image>") and "<|im_start|>" not in prompt
        record = json.loads(sample["filtered_resps"][0])
        # every generation parsed by a named rule or counted as a failure (no answer)
        assert record["method"] in PARSER_METHODS
        assert (record["answer"] is None) == (record["method"] == "failure")
        assert sample["doc"]["unit_id"] == f"bbq_v:{sample['doc']['unique_question_id']}"
    metrics = results["results"]["bbq_v_ext"]
    failures = sum(json.loads(s["filtered_resps"][0])["answer"] is None for s in samples)
    assert metrics["parse_failure_rate,parsed"] == pytest.approx(failures / len(samples))
    metering = results["config"]["metering"]
    assert metering["per_task"]["bbq_v_ext"]["n_requests"] == len(samples)
    assert results["config"]["hf_metered"]["generation_chat_template_applied_by"] == \
        "hf-multimodal-metered"
