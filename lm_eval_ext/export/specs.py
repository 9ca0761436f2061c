"""What each exportable task's folder holds: :class:`ExportSpec` for BBQ and XSTest.

The item list, prompt template, vendored modules, data files and YAML keys of a task, built
from our own task configs and data; :mod:`lm_eval_ext.export.upstream` writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from lm_eval_ext import __version__
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.export.task_yaml import task_config

#: the vendored modules, in dependency order, ending with the export glue
BBQ_MODULES = ("lm_eval_ext.tasks.common.answer_parser", "lm_eval_ext.tasks.common.scoring",
               "lm_eval_ext.tasks.bbq.metrics", "lm_eval_ext.tasks.bbq.results",
               "lm_eval_ext.export.glue.bbq")
XSTEST_MODULES = ("lm_eval_ext.tasks.xstest.classifier", "lm_eval_ext.tasks.xstest.results",
                  "lm_eval_ext.export.glue.xstest")

BBQ_CITATION = """@inproceedings{parrish-etal-2022-bbq,
  title = {{BBQ}: A Hand-Built Bias Benchmark for Question Answering},
  author = {Parrish, Alicia and Chen, Angelica and Nangia, Nikita and Padmakumar, Vishakh and
            Phang, Jason and Thompson, Jana and Htut, Phu Mon and Bowman, Samuel},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2022},
  year = {2022}
}"""
XSTEST_CITATION = """@inproceedings{rottger-etal-2024-xstest,
  title = {{XST}est: A Test Suite for Identifying Exaggerated Safety Behaviours in Large
           Language Models},
  author = {R{\\"o}ttger, Paul and Kirk, Hannah and Vidgen, Bertie and Attanasio, Giuseppe and
            Bianchi, Federico and Hovy, Dirk},
  booktitle = {NAACL 2024},
  year = {2024}
}"""


@dataclass(frozen=True)
class ExportSpec:
    """Everything that differs between two exported task folders."""

    task: str
    title: str  # the README's title
    paper: str
    citation: str
    description: str
    item_header: tuple[str, ...]
    item_rows: list[tuple[Any, ...]]
    template: str  # the prompt with sentinel fields, vendored as PROMPT_TEMPLATE
    modules: tuple[str, ...]  # vendored into utils.py
    utils_title: str
    data: dict[str, Any]  # the YAML's dataset keys
    yaml: dict[str, Any]  # the YAML's other task-specific keys (target, metrics, metadata)
    #: our task's few-shot pool (outside the evaluated items) as the shots lm-eval shows:
    #: ``prompt`` and ``target`` of each, in our order
    fewshot: list[dict[str, str]]


def _data_files(benchmark: Any, paths: Sequence[str], local: bool) -> list[str]:
    """The pinned files' URLs, or with ``local`` their verified local copies.

    Local copies are for running an export offline; an upstream contribution uses the URLs.
    """
    if not local:
        return [benchmark.file(p).url for p in paths]
    from lm_eval_ext.data.store import benchmark_dir

    folder = benchmark_dir(benchmark.name, tuple(paths))
    return [str(folder / p) for p in paths]


def _data(path: str, urls: list[str] | str) -> dict[str, Any]:
    return {"dataset_path": path, "dataset_kwargs": {"data_files": {"test": urls}},
            "test_split": "test"}


def _exported_metadata(version: float, **fields: Any) -> dict[str, Any]:
    """The exported YAML's metadata: ``version`` is our task's, so it moves as its content does."""
    return {"metadata": {"version": version, "exported_from": f"lm-eval-ext {__version__}",
                         **fields}}


def bbq_export(membership: str, template_tier: str | None = None,
               local_data: bool = False) -> ExportSpec:
    """One frozen BBQ membership as an upstream task ``bbq_ext_<membership>``."""
    from lm_eval_ext.data.instrument import load_membership
    from lm_eval_ext.data.sources import BBQ
    from lm_eval_ext.tasks.bbq import TASK_VERSION
    from lm_eval_ext.tasks.bbq.utils import ITEMS
    from lm_eval_ext.tasks.bbq.utils import load_membership as task_splits
    from lm_eval_ext.tasks.common.prompting import resolve_tier

    loaded = load_membership(membership)
    tier = resolve_tier(template_tier, "generative")
    pool = task_splits(membership, "generative", tier)["fewshot"]
    task = f"bbq_ext_{membership}"
    sentinel = {name: f"\x00{name}\x00" for name in ("context", "question", "ans0", "ans1",
                                                     "ans2")}
    config = task_config("bbq", "_bbq_generative_yaml")
    urls = _data_files(BBQ, [f.path for f in BBQ.files if f.path.startswith("data/")],
                       local_data)
    return ExportSpec(
        task=task, title=f"BBQ, frozen membership {membership} (lm-eval-ext)",
        paper="BBQ: A Hand-Built Bias Benchmark for Question Answering, https://aclanthology."
              "org/2022.findings-acl.165/",
        citation=BBQ_CITATION,
        description=(
            f"The {len(loaded.rows)} items of lm-eval-ext's frozen membership `{membership}` "
            f"(SHA-256 {loaded.membership_sha256}; whole 4-row units), asked as one user turn "
            f"with the `{tier}` prompt, answered as JSON and read by a strict JSON-first parser "
            "whose failures count as wrong (`parse_failure_rate`). Bias scores follow the "
            "upstream rule (`analysis_scripts/BBQ_calculate_bias_score.R`). Unlike "
            "`bbq_generate`, the item set is a fixed, fingerprinted membership and parse "
            "failures are reported."),
        item_header=("category", "example_id", "unit_id", "target_loc", "unknown_loc"),
        item_rows=[(row["category"], row["example_id"], row["unit_id"],
                    "" if row.get("target_loc") is None else row["target_loc"],
                    row["unknown_loc"]) for row in loaded.rows],
        template=ITEMS.prepare({**sentinel, "label": 0, "unknown_loc": 2}, tier,
                               "generative")["prompt"],
        modules=BBQ_MODULES,
        utils_title=f"lm-eval hooks of {task} (BBQ, membership {membership!r}, tier {tier!r}).",
        data=_data("json", urls),
        fewshot=[{"prompt": d["prompt"], "target": d["target_text"]} for d in pool],
        yaml={"doc_to_target": "{{target}}",
              "target_delimiter": config["target_delimiter"],
              "generation_kwargs": config["generation_kwargs"],
              "filter_list": config["filter_list"], "process_results": config["process_results"],
              "metric_list": config["metric_list"],
              **_exported_metadata(float(TASK_VERSION), membership=membership,
                                   membership_sha256=loaded.membership_sha256,
                                   template_tier=tier, bbq_commit=BBQ.commit)})


def xstest_export(template_tier: str | None = None, local_data: bool = False) -> ExportSpec:
    """XSTest v2's 440 evaluated prompts as an upstream task ``xstest_ext_v2``."""
    from lm_eval_ext.data.sources import XSTEST
    from lm_eval_ext.tasks.common.prompting import render_prompt, resolve_tier
    from lm_eval_ext.tasks.xstest.utils import STYLE, load_docs

    tier = resolve_tier(template_tier, "generative")
    task = "xstest_ext_v2"
    splits = load_docs("generative", tier)
    docs = splits["test"]
    common = task_config("xstest", "_xstest_ext_common_yaml")
    config = task_config("xstest", "xstest_ext.yaml")
    [prompts] = _data_files(XSTEST, ["xstest_prompts.csv"], local_data)
    return ExportSpec(
        task=task, title="XSTest v2 (lm-eval-ext)",
        paper="XSTest: A Test Suite for Identifying Exaggerated Safety Behaviours in Large "
              "Language Models, https://arxiv.org/abs/2308.01263",
        citation=XSTEST_CITATION,
        description=(
            f"{len(docs)} of XSTest's 450 prompts (10 are lm-eval-ext's few-shot pool), asked "
            f"as one user turn with the `{tier}` prompt; each response is classified by a "
            "rule-based classifier (full compliance / full refusal / partial refusal). `acc` = "
            "appropriate behaviour; `refusal_rate_safe` is over-refusal on the "
            f"{sum(d['safety_label'] == 'safe' for d in docs)} safe prompts evaluated."),
        item_header=("id",), item_rows=[(doc["xstest_id"],) for doc in docs],
        template=render_prompt(STYLE, "\x00prompt\x00", tier, "generative"),
        modules=XSTEST_MODULES, utils_title=f"lm-eval hooks of {task} (XSTest v2, tier {tier!r}).",
        data=_data("csv", prompts),
        fewshot=[{"prompt": d["prompt"], "target": d["target_text"]} for d in splits["fewshot"]],
        yaml={"doc_to_target": "{{target}}", "target_delimiter": config["target_delimiter"],
              "generation_kwargs": config["generation_kwargs"],
              "filter_list": config["filter_list"], "process_results": config["process_results"],
              "metric_list": common["metric_list"],
              **_exported_metadata(config["metadata"]["version"], template_tier=tier,
                                   xstest_commit=XSTEST.commit)})


def export_spec(task: str, template_tier: str | None, local_data: bool) -> ExportSpec:
    """The export of one of our task names; a non-default tier is part of the exported name."""
    from lm_eval_ext.tasks.common.prompting import DEFAULT_TIER

    if task == "xstest_ext":
        spec = xstest_export(template_tier, local_data)
    elif task == "bbq_instrument":
        spec = bbq_export("instrument", template_tier, local_data)
    elif task.startswith("bbq_subset_") and not task.endswith("_loglik"):
        spec = bbq_export(task.removeprefix("bbq_subset_"), template_tier, local_data)
    else:
        raise ConfigError(f"export-upstream: {task} cannot be exported; exportable: "
                          "bbq_instrument, bbq_subset_<membership> (e.g. bbq_subset_25pct), "
                          "xstest_ext (generative tasks)")
    if template_tier and template_tier != DEFAULT_TIER["generative"]:
        spec = replace(spec, task=f"{spec.task}_{template_tier}")
    return spec
