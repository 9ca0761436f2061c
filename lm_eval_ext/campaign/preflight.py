"""Checks made once, before a campaign, grid or sequential run starts any lm-eval process.

A misspelled model arg, an unknown task or an invalid task setting would otherwise surface
once per cell, each after a model load, or only in ``failed/*.log``. No model is loaded here;
task names are looked up in the task index (narrowed to our folders when every task is ours).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lm_eval_ext.campaign.spec import MODEL, Cell, parse_model_args
from lm_eval_ext.errors import ConfigError, check_choice
from lm_eval_ext.tasks.common.prompting import TIERS

#: task settings (``--metadata`` keys) whose values are checked here, with their choices
SETTING_CHOICES = {"template_tier": TIERS}


def _check_recheck(cell: Cell) -> None:
    """The re-check's share, which a cell's run passes only when the cell is derived."""
    from lm_eval_ext.backends.model_args import recheck_fraction

    share = parse_model_args(cell.model_args, f"cell {cell.cell_id}").get("recheck")
    if share is not None:
        try:
            recheck_fraction(cell.backend, share)
        except ConfigError as exc:
            raise ConfigError(f"cell {cell.cell_id}: {exc}") from None


def check_model_args(model_args: str, batch_size: Any, where: str,
                     batch_where: str | None = None, backend: str = MODEL) -> None:
    """A metered model's ``--model_args`` and the batch size, as it would check them at load.

    ``where`` names the model args in an error, ``batch_where`` the batch size (default: the
    same place); ``backend``: hf-metered or vllm-metered.
    """
    import importlib
    from pathlib import Path

    from lm_eval_ext.backends.lm_eval_names import MODELS
    from lm_eval_ext.backends.model_args import check_batch_size
    from lm_eval_ext.backends.parent_run import load_parent

    try:
        module, name = MODELS[backend].split(":")
        getattr(importlib.import_module(module), name).check_model_args(model_args)
        args = parse_model_args(model_args, where)
        if args.get("answers_from"):  # the parent checks hf-metered makes before its load
            load_parent(Path(str(args["answers_from"])).expanduser(), backend, args,
                        {"batch_size": batch_size})
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    try:
        check_batch_size(backend, batch_size)
    except ConfigError as exc:
        raise ConfigError(f"{batch_where or where}: {exc}") from None


def check_task_settings(metadata: Mapping[str, Any] | None, where: str,
                        tasks: Sequence[str] | None = None) -> None:
    """Keys and values of our task settings (e.g. ``template_tier``) in a run's ``metadata``.

    ``tasks``: the run's tasks, where known (:func:`check_setting_keys`).
    """
    from lm_eval_ext.plugin.task_folders import check_setting_keys

    try:
        check_setting_keys(metadata, tasks)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    for key, choices in SETTING_CHOICES.items():
        if metadata and key in metadata:
            try:
                check_choice(key, metadata[key], choices)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None


def check_task_names(tasks: Iterable[str], include_path: str | None = None) -> None:
    """Every task is known to lm-eval (with our folders and ``include_path``), else the closest."""
    from lm_eval_ext.command_preflight import unknown_task_message
    from lm_eval_ext.plugin.task_folders import full_task_index, narrow_task_manager

    names = sorted(set(tasks))
    extra = [include_path] if include_path else []
    if narrow_task_manager(names, extra) is not None:
        return
    known = full_task_index(include_path)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(unknown_task_message(",".join(unknown), list(known)))


def _check_lm_eval_options(cell: Cell) -> None:
    """The cell's lm_eval options as ``lm-eval-ext run`` checks them on its command line."""
    import json

    from lm_eval_ext.command_preflight import (
        PreflightError,
        check_arguments_lm_eval_parses,
        check_chat_template_exists,
    )
    from lm_eval_ext.lm_eval_inputs import check_samples

    samples = cell.options.get("samples")
    try:
        check_arguments_lm_eval_parses(cell.lm_eval_argv("<cell>"))
        if cell.options.get("apply_chat_template") not in (None, False):
            check_chat_template_exists(parse_model_args(cell.model_args, cell.cell_id))
        if samples is not None:  # the items it names, in the order lm-eval labels them
            check_samples(json.dumps(samples) if isinstance(samples, Mapping) else str(samples),
                          [cell.task], cell.options.get("include_path"))
    except PreflightError as exc:
        raise ConfigError(f"cell {cell.cell_id}: {exc} (in the campaign file, each lm_eval "
                          "option is its flag's name without --)") from None


def check_cells(cells: Sequence[Cell], devices: bool = False) -> None:
    """Model args, batch sizes, task settings and task names of a campaign's cells, once each.

    ``devices``: each cell's ``device`` against this machine (before cells run here); without
    it (a dry run, which may plan for another machine) a CUDA or mps device passes, and only
    one no machine runs (``xpu``, a misspelling) is refused.
    """
    from lm_eval_ext.command_preflight import (
        NoCudaHere,
        PreflightError,
        check_device,
        check_fewshot_pools,
        check_max_batch_size,
        check_num_fewshot,
    )

    seen: set[tuple[str, str]] = set()
    for cell in cells:
        device = cell.options.get("device")
        if isinstance(device, str):
            try:
                check_device(device, "device:")
            except NoCudaHere:
                if not devices:  # a dry run may plan for a machine with a GPU
                    continue
                fix = "set device: cpu, or run the campaign on a machine with a GPU"
            except PreflightError as exc:
                if not devices and device.partition(":")[0] == "mps":  # or for a Mac
                    continue
                fix = str(exc)
            else:
                continue
            raise ConfigError(f"cell {cell.cell_id}: device: {device} cannot run here: {fix}")
    for cell in cells:
        shots = cell.options.get("num_fewshot")
        if shots is not None:  # lm-eval asserts on a pool too small, after the model loads
            try:
                check_num_fewshot(shots, "num_fewshot:")
                check_fewshot_pools([cell.task], int(shots), "num_fewshot:")
            except PreflightError as exc:
                raise ConfigError(f"cell {cell.cell_id}: {exc}") from None
        batch_size = cell.options.get("batch_size", 1)
        if cell.options.get("max_batch_size") is not None:  # lm-eval ignores it otherwise
            try:
                check_max_batch_size(cell.options["max_batch_size"], batch_size,
                                     "max_batch_size:", "batch_size: auto")
            except PreflightError as exc:
                raise ConfigError(f"cell {cell.cell_id}: {exc}") from None
        if (cell.model_args, str(batch_size)) not in seen:
            seen.add((cell.model_args, str(batch_size)))
            check_model_args(cell.model_args_for(None), batch_size, f"cell {cell.cell_id}",
                             backend=cell.backend)
            _check_recheck(cell)
        check_task_settings(cell.options.get("metadata"), f"cell {cell.cell_id}", [cell.task])
        _check_lm_eval_options(cell)
    for include_path, tasks in _tasks_by_include_path(cells).items():
        check_task_names(tasks, include_path)
    _check_gen_kwargs_used(cells)
    _check_shared_caches(cells)


def _check_shared_caches(cells: Sequence[Cell]) -> None:
    """Cells that share a ``use_cache`` path load one model with the same answer settings.

    (lm-eval keys a cached answer by the request's text alone: one cell would take another
    model's answers as its own.)
    """
    from lm_eval_ext.response_cache import cache_owner

    first: dict[str, tuple[Cell, dict[str, Any]]] = {}
    for cell in cells:
        path = cell.options.get("use_cache")
        if path is None:
            continue
        owner = cache_owner(cell.backend, parse_model_args(cell.model_args, cell.cell_id))
        other, theirs = first.setdefault(str(path), (cell, owner))
        if theirs != owner:
            raise ConfigError(
                f"cells {other.cell_id} and {cell.cell_id} share use_cache: {path} but not the "
                f"model and settings their answers depend on ({theirs['model']} with "
                f"{theirs['answer_args']}; {owner['model']} with {owner['answer_args']}), and "
                "lm-eval keys a cached answer by the request's text alone: leave use_cache "
                "out (a campaign resumes from its finished cells without it), or give it only "
                "to conditions whose cells load one model with one setting")


def _check_gen_kwargs_used(cells: Sequence[Cell]) -> None:
    """``gen_kwargs`` that reach no generative cell are refused.

    (Every cell given them scores by log-likelihood: lm-eval would record them, used nowhere.)
    """
    from lm_eval_ext.command_preflight import PreflightError, check_gen_kwargs_used

    given = [c for c in cells if c.options.get("gen_kwargs")]
    for include_path in {c.options.get("include_path") for c in given}:
        try:
            check_gen_kwargs_used(sorted({c.task for c in given
                                          if c.options.get("include_path") == include_path}),
                                  include_path, "gen_kwargs (the lm_eval block's or a "
                                                "condition's)")
        except PreflightError as exc:
            raise ConfigError(str(exc)) from None


def check_judgeable(cells: Sequence[Cell]) -> None:
    """``--judge`` on a campaign whose tasks all score by log-likelihood is refused.

    (The judge scores generated reasoning: it would refuse only after every cell had run.)
    """
    from lm_eval_ext.command_preflight import scores_by_loglik_only

    by_path = _tasks_by_include_path(cells)
    if by_path and all(scores_by_loglik_only(sorted(tasks), path)
                       for path, tasks in by_path.items()):
        tasks = sorted({cell.task for cell in cells})
        raise ConfigError(f"--judge scores generated reasoning, and every task of the campaign "
                          f"scores by log-likelihood ({', '.join(tasks)}): leave --judge out, "
                          "or use the generative tasks (without _loglik)")


def _tasks_by_include_path(cells: Sequence[Cell]) -> dict[str | None, set[str]]:
    """The cells' tasks, by the ``include_path`` each cell reads them from."""
    by_path: dict[str | None, set[str]] = {}
    for cell in cells:
        by_path.setdefault(cell.options.get("include_path"), set()).add(cell.task)
    return by_path
