"""``lm-eval-ext export-upstream``: our tasks as lm-evaluation-harness task folders.

An exported folder depends on nothing but lm-eval and the standard library:

* the data come from the upstream files pinned by commit (``dataset_path: json``/``csv`` with
  ``data_files`` at raw.githubusercontent.com URLs of the pinned commit);
* ``<task>_items.csv`` lists the evaluated items and the fields derived from BBQ's metadata
  (ids and indices only, no benchmark text);
* ``utils.py`` is generated: lm-eval-ext's stdlib-only parser, scoring and metric modules,
  vendored verbatim (as code, without comments), then the export glue
  (:mod:`lm_eval_ext.export.glue`) with the prompt template filled in;
* the YAML is our own task config with its hooks pointed at ``utils.py``;
* ``README.md`` follows lm-eval's task README template, checklist included.

Zero-shot only: the few-shot pools are not exported.
"""

from __future__ import annotations

import ast
import csv
import importlib
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from lm_eval_ext import __version__
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import folder_written_whole
from lm_eval_ext.paths import package_tasks_dir

#: the vendored modules, in dependency order, ending with the export glue
BBQ_MODULES = ("lm_eval_ext.tasks.common.answer_parser", "lm_eval_ext.tasks.common.scoring",
               "lm_eval_ext.tasks.bbq.metrics", "lm_eval_ext.tasks.bbq.results",
               "lm_eval_ext.export.glue.bbq")
XSTEST_MODULES = ("lm_eval_ext.tasks.xstest.classifier", "lm_eval_ext.tasks.xstest.results",
                  "lm_eval_ext.export.glue.xstest")


class _Function(str):
    """A ``!function module.name`` tag of a task YAML."""


class _TaskLoader(yaml.SafeLoader):
    pass


class _TaskDumper(yaml.SafeDumper):
    pass


_TaskLoader.add_constructor("!function", lambda loader, node: _Function(loader.construct_scalar(node)))
_TaskDumper.add_representer(
    _Function, lambda dumper, tag: dumper.represent_scalar(
        "!function", f"utils.{tag.rsplit('.', 1)[-1]}"))


def _task_config(*relative: str) -> dict[str, Any]:
    """One of our task YAML files, ``!function`` tags kept as :class:`_Function`."""
    path = package_tasks_dir().joinpath(*relative)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)  # noqa: S506


# -- utils.py --------------------------------------------------------------------------------
def _module_parts(name: str, constants: dict[str, Any]) -> tuple[list[str], list[ast.stmt]]:
    """A module's non-lm-eval-ext imports and its other top-level statements."""
    module = importlib.import_module(name)
    tree = ast.parse(inspect.getsource(module))
    imports, body = [], []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or (
                node.module or "").startswith("lm_eval_ext")):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
            continue
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and node is tree.body[0]):
            continue  # the module docstring
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id in constants:
                value = ast.parse(repr(constants[target.id]), mode="eval").body
                node = ast.Assign(targets=[ast.Name(target.id)], value=value, lineno=0)
        body.append(_DropSignatureAnnotations().visit(node))
    return imports, body


class _DropSignatureAnnotations(ast.NodeTransformer):
    """Function signatures without annotations (dataclass fields keep theirs).

    lm-eval executes ``utils.py`` before registering it in ``sys.modules``; with postponed
    annotations (``from __future__ import annotations``) ``dataclasses`` then fails to resolve
    its fields' string annotations, so the generated module evaluates annotations eagerly
    and keeps them only where they are plain runtime types (dataclass fields).
    """

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg):
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def vendored_utils(modules: Sequence[str], constants: dict[str, Any], title: str) -> str:
    """``utils.py`` of an exported task: the modules' code in order, constants filled in.

    Raises:
        ConfigError: Two modules define the same top-level name, or a module imports
            something outside the standard library (the folder must need lm-eval only).
    """
    plain: set[str] = set()
    from_imports: dict[str, set[str]] = {}
    sections, owners = [], {}
    for name in modules:
        module_imports, body = _module_parts(name, constants)
        for statement in module_imports:
            root = ast.parse(statement).body[0]
            top = (root.module if isinstance(root, ast.ImportFrom) else root.names[0].name)
            if top.split(".")[0] not in sys.stdlib_module_names:
                raise ConfigError(f"{name} imports {top}: an exported utils.py may use the "
                                  "standard library only")
            if isinstance(root, ast.ImportFrom):
                from_imports.setdefault(top, set()).update(a.name for a in root.names)
            else:
                plain.update(a.name for a in root.names)
        for node in body:
            for defined in _defined(node):
                if defined in owners and defined not in constants:
                    raise ConfigError(f"{defined} is defined in {owners[defined]} and {name}: "
                                      "rename one before exporting")
                owners[defined] = name
        path = name.replace(".", "/") + ".py"
        sections.append(f"# ---- from lm-eval-ext {__version__}: {path}\n\n"
                        + "\n\n\n".join(ast.unparse(node) for node in body))
    header = (f'"""{title}\n\nGenerated by `lm-eval-ext export-upstream` (lm-eval-ext '
              f'{__version__}); edit the source modules named below, not this file.\n"""\n')
    imports = [f"import {module}" for module in sorted(plain)] + [
        f"from {module} import {', '.join(sorted(names))}"
        for module, names in sorted(from_imports.items())]
    return (header + "\n" + "\n".join(imports)
            + "\n\n\n" + "\n\n\n".join(sections) + "\n")


# -- the task folders ------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportedTask:
    """One exported task folder."""

    task: str
    folder: Path
    n_items: int


def _data_files(benchmark: Any, paths: Sequence[str], local: bool) -> list[str]:
    """The pinned files' URLs, or with ``local`` their verified local copies.

    Local copies are for running an export offline; an upstream contribution uses the URLs.
    """
    if not local:
        return [benchmark.file(p).url for p in paths]
    from lm_eval_ext.data.store import benchmark_dir

    folder = benchmark_dir(benchmark.name, tuple(paths))
    return [str(folder / p) for p in paths]


def _write_yaml(path: Path, config: dict[str, Any]) -> None:
    path.write_text(yaml.dump(config, Dumper=_TaskDumper, sort_keys=False, allow_unicode=True,
                              width=100), encoding="utf-8")


def _readme(task: str, title: str, paper: str, citation: str, description: str,
            how_to_test: str) -> str:
    return f"""# {title}

### Paper

{paper}

{description}

### Citation

```
{citation}
```

### Groups, Tags, and Tasks

#### Tasks

* `{task}`: generative, zero-shot; exported from lm-eval-ext {__version__}.

### Checklist

For adding novel benchmarks/datasets to the library:
* [x] Is the task an existing benchmark in the literature?
  * [x] Have you referenced the original paper that introduced the task?
  * [x] If yes, does the original paper provide a reference implementation? If so, have you
    checked against the reference implementation and documented how to run such a test?
    {how_to_test}


If other tasks on this dataset are already supported:
* [ ] Is the "Main" variant of this task clearly denoted?
* [x] Have you provided a short sentence in a README on what each new variant adds / evaluates?
* [ ] Have you noted which, if any, published evaluation setups are matched by this variant?
"""


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


def _write_export(spec: ExportSpec, out: Path, overwrite: bool) -> ExportedTask:
    """One task folder: the item list, the vendored ``utils.py``, the YAML and the README.

    Written beside its final place and swapped in whole: an earlier export of the task is
    replaced only with ``overwrite`` (none of its files survive), and a crash leaves the old
    folder or the new one, never a mix.
    """
    target = out / spec.task
    with folder_written_whole(target, replace=overwrite) as folder:
        items_file = f"{spec.task}_items.csv"
        with open(folder / items_file, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(spec.item_header)
            writer.writerows(spec.item_rows)
        (folder / "utils.py").write_text(vendored_utils(
            spec.modules, {"PROMPT_TEMPLATE": spec.template, "ITEMS_FILE": items_file},
            spec.utils_title), encoding="utf-8")
        _write_yaml(folder / f"{spec.task}.yaml", {
            "task": spec.task, **spec.data, "process_docs": _Function("process_docs"),
            "output_type": "generate_until", "doc_to_text": "{{prompt}}", **spec.yaml})
        (folder / "README.md").write_text(_readme(
            spec.task, spec.title, spec.paper, spec.citation, spec.description,
            "lm-eval-ext's test suite runs this folder with `--include_path` and compares every "
            "item with lm-eval-ext's own task (`tests/test_export_upstream.py`)."),
            encoding="utf-8")
    return ExportedTask(spec.task, target, len(spec.item_rows))


def _data(path: str, urls: list[str] | str) -> dict[str, Any]:
    return {"dataset_path": path, "dataset_kwargs": {"data_files": {"test": urls}},
            "test_split": "test"}


def _exported_metadata(**fields: Any) -> dict[str, Any]:
    return {"metadata": {"version": 1.0, "exported_from": f"lm-eval-ext {__version__}",
                         **fields}}


def bbq_export(membership: str, template_tier: str | None = None,
               local_data: bool = False) -> ExportSpec:
    """One frozen BBQ membership as an upstream task ``bbq_ext_<membership>``."""
    from lm_eval_ext.data.instrument import load_membership
    from lm_eval_ext.data.sources import BBQ
    from lm_eval_ext.tasks.bbq.utils import ITEMS
    from lm_eval_ext.tasks.common.prompting import resolve_tier

    loaded = load_membership(membership)
    tier = resolve_tier(template_tier, "generative")
    task = f"bbq_ext_{membership}"
    sentinel = {name: f"\x00{name}\x00" for name in ("context", "question", "ans0", "ans1",
                                                     "ans2")}
    config = _task_config("bbq", "_bbq_generative_yaml")
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
        yaml={"doc_to_target": "{{target}}",
              "target_delimiter": config["target_delimiter"],
              "generation_kwargs": config["generation_kwargs"],
              "filter_list": config["filter_list"], "process_results": config["process_results"],
              "metric_list": config["metric_list"],
              **_exported_metadata(membership=membership,
                                   membership_sha256=loaded.membership_sha256,
                                   template_tier=tier, bbq_commit=BBQ.commit)})


def xstest_export(template_tier: str | None = None, local_data: bool = False) -> ExportSpec:
    """XSTest v2's 440 evaluated prompts as an upstream task ``xstest_ext_v2``."""
    from lm_eval_ext.data.sources import XSTEST
    from lm_eval_ext.tasks.common.prompting import render_prompt, resolve_tier
    from lm_eval_ext.tasks.xstest.utils import STYLE, load_docs

    tier = resolve_tier(template_tier, "generative")
    task = "xstest_ext_v2"
    docs = load_docs("generative", tier)["test"]
    common = _task_config("xstest", "_xstest_ext_common_yaml")
    config = _task_config("xstest", "xstest_ext.yaml")
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
            "appropriate behaviour; `refusal_rate_safe` is over-refusal on the 250 safe "
            "prompts."),
        item_header=("id",), item_rows=[(doc["xstest_id"],) for doc in docs],
        template=render_prompt(STYLE, "\x00prompt\x00", tier, "generative"),
        modules=XSTEST_MODULES, utils_title=f"lm-eval hooks of {task} (XSTest v2, tier {tier!r}).",
        data=_data("csv", prompts),
        yaml={"doc_to_target": "",
              "generation_kwargs": config["generation_kwargs"],
              "filter_list": config["filter_list"], "process_results": config["process_results"],
              "metric_list": common["metric_list"],
              **_exported_metadata(template_tier=tier, xstest_commit=XSTEST.commit)})


def _spec(task: str, template_tier: str | None, local_data: bool) -> ExportSpec:
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


def export_upstream(tasks: Sequence[str], out: str | Path, template_tier: str | None = None,
                    local_data: bool = False, overwrite: bool = False) -> list[ExportedTask]:
    """Export our tasks (``bbq_instrument``, ``bbq_subset_<m>``, ``xstest_ext``) to ``out``.

    ``local_data``: point ``data_files`` at the verified local copies instead of the pinned
    URLs (to run the folder offline; never for a contribution). Every task is checked before
    anything is written; an earlier export in ``out`` is replaced only with ``overwrite``.
    """
    out = Path(out)
    specs = [_spec(task, template_tier, local_data) for task in dict.fromkeys(tasks)]
    existing = [spec.task for spec in specs if (out / spec.task).exists()]
    if existing and not overwrite:
        raise ConfigError(f"export-upstream: {out} already holds {', '.join(existing)} (an "
                          "earlier export); pass --overwrite to replace it, or choose another --out")
    return [_write_export(spec, out, overwrite) for spec in specs]
