"""Our models in lm-eval: registered by name, and the embedded model's runs named.

:func:`activate` makes the start-up hook's installs (:mod:`lm_eval_ext.plugin.autoload`) in this
process, for ``lm-eval-ext run``, a campaign and the judge.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

from lm_eval_ext.backends.lm_eval_names import MODELS
from lm_eval_ext.plugin.wrapping import wrap_once


def register_models() -> None:
    """Register our models as lazy placeholders, after lm-eval's own built-ins.

    Importing ``lm_eval.models`` first matters: ``get_model`` only imports the built-ins
    when the registry is empty, so registering first would hide ``--model hf``.
    """
    import lm_eval.models  # noqa: F401  (registers the built-in models)
    from lm_eval.api.registry import model_registry

    for name, target in MODELS.items():
        if name not in model_registry:
            model_registry.register(name, target=target)


def embedded_run_name(model_args) -> str:
    """Output-folder name of an hf-metered run of the embedded model: model and precision.

    lm-eval names the folder after ``pretrained=``; without it, after a seeded "random" draw,
    so every headline run would land in the same meaningless folder.
    """
    from lm_eval.utils import simple_parse_args_string

    from lm_eval_ext.backends.embedded_model import MODEL_NAME
    from lm_eval_ext.backends.precision import precision_name

    args = model_args if isinstance(model_args, dict) else simple_parse_args_string(model_args or "")
    # without precision= the embedded checkpoint runs in its own dtype: float32 (dequantised)
    precision = args.get("precision") or precision_name(args.get("dtype")) or "fp32"
    return f"{MODEL_NAME}__embedded__{precision}"


@wrap_once("lm_eval.loggers.evaluation_tracker", "GeneralConfigTracker.log_experiment_args")
def name_embedded_runs(log_experiment_args: Callable) -> Callable:
    """Name the embedded model's output folder by model and precision (not randomly)."""
    @functools.wraps(log_experiment_args)
    def logged(self, model_source, model_args, *args, **kwargs):
        log_experiment_args(self, model_source, model_args, *args, **kwargs)
        if model_source in MODELS and self._get_model_name(model_args) is None:
            from lm_eval.utils import sanitize_model_name

            self.model_name = embedded_run_name(model_args)
            self.model_name_sanitized = sanitize_model_name(self.model_name)
    return logged


def activate() -> None:
    """The start-up hook's installs but the stock ``lm_eval`` command's (its errors, its checks)."""
    from lm_eval_ext.plugin.saved_outputs import check_saved_results, check_saved_samples
    from lm_eval_ext.plugin.task_folders import add_task_folders
    from lm_eval_ext.plugin.upstream_noise import drop_metadata_hint, quiet_git_hash

    for install in (register_models, add_task_folders, drop_metadata_hint, name_embedded_runs,
                    check_saved_results, check_saved_samples, quiet_git_hash):
        install()
    if "lm_eval.models.vllm_causallms" in sys.modules:  # else its import runs it (autoload)
        from lm_eval_ext.plugin.vllm_engines import hand_over_kept_engines

        hand_over_kept_engines()
