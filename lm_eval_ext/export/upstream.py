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

This module writes the folders; what each holds is in :mod:`~lm_eval_ext.export.specs`,
the generated ``utils.py`` in :mod:`~lm_eval_ext.export.vendoring`, the YAML tags in
:mod:`~lm_eval_ext.export.task_yaml`.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lm_eval_ext import __version__
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.export.specs import ExportSpec, export_spec
from lm_eval_ext.export.task_yaml import Function, write_yaml
from lm_eval_ext.export.vendoring import vendored_utils
from lm_eval_ext.files import folder_written_whole


@dataclass(frozen=True)
class ExportedTask:
    """One exported task folder."""

    task: str
    folder: Path
    n_items: int


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

* `{task}`: generative, zero-shot (`--num_fewshot N` takes the first N of lm-eval-ext's
  few-shot pool, items outside the evaluated ones); exported from lm-eval-ext {__version__}.
  The prompt is one user turn of the model's chat template: run it with
  `--apply_chat_template`, as lm-eval-ext's protocol does (its `hf-metered` applies the template
  itself). Without it an instruction-tuned model reads the bare prompt and answers otherwise.

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
        write_yaml(folder / f"{spec.task}.yaml", {
            "task": spec.task, **spec.data, "process_docs": Function("process_docs"),
            "output_type": "generate_until", "doc_to_text": "{{prompt}}",
            # --num_fewshot draws our pool (outside the items), never an evaluated item
            "fewshot_config": {"sampler": "first_n", "samples": spec.fewshot}, **spec.yaml})
        (folder / "README.md").write_text(_readme(
            spec.task, spec.title, spec.paper, spec.citation, spec.description,
            "lm-eval-ext's test suite runs this folder with `--include_path` and compares every "
            "item with lm-eval-ext's own task (`tests/test_export_upstream.py`)."),
            encoding="utf-8")
    return ExportedTask(spec.task, target, len(spec.item_rows))


def export_upstream(tasks: Sequence[str], out: str | Path, template_tier: str | None = None,
                    local_data: bool = False, overwrite: bool = False) -> list[ExportedTask]:
    """Export our tasks (``bbq_instrument``, ``bbq_subset_<m>``, ``xstest_ext``) to ``out``.

    ``local_data``: point ``data_files`` at the verified local copies instead of the pinned
    URLs (to run the folder offline; never for a contribution). Every task is checked before
    anything is written; an earlier export in ``out`` is replaced only with ``overwrite``.
    """
    out = Path(out)
    specs = [export_spec(task, template_tier, local_data) for task in dict.fromkeys(tasks)]
    existing = [spec.task for spec in specs if (out / spec.task).exists()]
    if existing and not overwrite:
        raise ConfigError(f"export-upstream: {out} already holds {', '.join(existing)} (an "
                          "earlier export); pass --overwrite to replace it, or choose another --out")
    return [_write_export(spec, out, overwrite) for spec in specs]
