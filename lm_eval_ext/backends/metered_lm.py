"""``MeteredLM``: the one base class of every metered lm-eval model.

Put it before an lm-eval model class, ``class MyMetered(MeteredLM, SomeLM)``, and ``SomeLM``'s
three request methods run inside per-task energy windows (:class:`~lm_eval_ext.metering.Metering`,
backend-independent). What a backend adds is composed, not inherited:

* ``self.metering``: the seam (:meth:`start_metered` starts it, the same way for every backend);
* ``self.chat``: the chat-template policy for generation requests (None: prompts as they are);
* :meth:`serve`: the one hook where a backend routes a task's requests (a packed scorer, a
  fast generator) and stays inside the task's window;
* :meth:`metering_extras`: the backend's fields of ``config.metering``;
* ``self.derived``: batch-1 answers (log-likelihoods, greedy texts) taken from a parent run,
  re-checked on a sample (:mod:`~lm_eval_ext.backends.derived_answers`; None: every request
  runs).

lm-eval's two constructors merge ``--model_args`` with lm-eval's own flags
(:func:`~lm_eval_ext.backends.model_args.merge_model_args`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lm_eval_ext.answers import CONFIG_KEY, AnswerLog
from lm_eval_ext.backends import embedded_model, packaged_models
from lm_eval_ext.backends.chat_template import ChatTemplatePolicy
from lm_eval_ext.backends.model_args import merge_model_args
from lm_eval_ext.backends.warm import WARM, WarmModel
from lm_eval_ext.errors import ConfigError, ending_lm_eval_command
from lm_eval_ext.metering import Metering
from lm_eval_ext.metering.derived import DERIVED_FLAG
from lm_eval_ext.metering.modes import joined

if TYPE_CHECKING:
    from lm_eval_ext.backends.derived_answers import DerivedAnswers


class MeteredLM:
    """Per-task energy windows around an lm-eval model's request methods, plus its policies.

    Subclasses name themselves in ``MODEL_NAME``, set ``self.metering`` (usually through
    :meth:`start_metered`), time their forward calls with ``self.metering.timed`` where they
    can, and may set ``self.chat``.
    """

    MODEL_NAME: str = "metered"
    #: the key of this model's own block in the results' model info (None: no block)
    INFO_KEY: str | None = None
    metering: Metering
    chat: ChatTemplatePolicy | None = None
    derived: DerivedAnswers | None = None
    _embedded: bool = False
    _packaged: dict[str, Any] | None = None
    _load_seconds: float | None = None
    #: what this run reused from an earlier run of the process (:mod:`~lm_eval_ext.backends.warm`)
    warm_reuse: dict[str, Any] = {"model_reused": False, "idle_reused_after_seconds": None}

    @property
    def answer_log(self) -> AnswerLog:
        """Every answer this model gave, per task (``config.responses``: :mod:`lm_eval_ext.answers`)."""
        if "_answer_log" not in self.__dict__:
            self.__dict__["_answer_log"] = AnswerLog()
        return self.__dict__["_answer_log"]

    # lm-eval's constructors ----------------------------------------------------------------
    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm-eval's constructor, with ``--model_args`` keys that clash with CLI flags explained.

        In the stock ``lm_eval`` command a bad model arg ends the run with one line and exit
        code 2 (:func:`~lm_eval_ext.errors.ending_lm_eval_command`).
        """
        with ending_lm_eval_command():
            return cls(**merge_model_args(cls.MODEL_NAME, arg_dict, additional_config))

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """The same from ``--model_args`` as a string (lm-eval's Python API)."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string or ""),
                                       additional_config)

    # starting -------------------------------------------------------------------------------
    def start_metered(self, pretrained: Any, load: Callable[[str, WarmModel | None], None],
                      cuda_indices: Callable[[], Sequence[int]], *, energy: str,
                      idle_seconds: float, load_key: str | None = None, sync: bool = True,
                      forward_observable: bool = True,
                      codecarbon: Callable[[list[int]], Any] | None = None,
                      power_check: bool = False) -> None:
        """Resolve the weights, ``load`` them (timed), then start metering on their GPUs.

        ``pretrained=None`` is the embedded SmolLM2; a packaged model's name resolves to its
        folder. In a campaign worker (:mod:`~lm_eval_ext.backends.warm`) ``load`` gets the
        model an earlier run kept under the same ``load_key``
        (:func:`~lm_eval_ext.backends.engine_key.load_key`; None: never kept), else None, and
        what it loads (:meth:`loaded_engine`) is kept for the next run. The idle baseline is
        sampled after the load, on the devices ``cuda_indices()`` names once the model is
        there, and again after the work; in a worker the previous run's last idle sample of
        the same devices stands for the sample before while it is young.
        """
        self._embedded = pretrained is None
        if self._embedded:
            pretrained = str(embedded_model.ensure_checkpoint())
        pretrained, self._packaged = packaged_models.resolve(pretrained)
        kept_model = WARM.model(load_key) if load_key is not None else None
        started = time.perf_counter()
        load(pretrained, kept_model)
        self._load_seconds = time.perf_counter() - started
        if kept_model is not None and self.loaded_engine()[0] is not kept_model.model:
            kept_model = None  # built afresh (the constructor did not take the kept one)
        if kept_model is not None:
            self.warm_reuse = {**self.warm_reuse, "model_reused": True,
                               "model_load_seconds": round(kept_model.load_seconds, 2)}
        elif load_key is not None:
            WARM.keep_model(load_key, *self.loaded_engine(), self._load_seconds)
        cuda = list(cuda_indices())
        source = f"{energy}:{idle_seconds}"
        self._idle_key = (cuda, source)
        kept = WARM.idle(cuda, source)
        self.metering = Metering.start(
            cuda, energy=energy, sync=sync, idle_seconds=idle_seconds,
            forward_observable=forward_observable,
            codecarbon=codecarbon(cuda) if codecarbon is not None else None,
            idle=kept.idle if kept is not None else None, power_check=power_check)
        if kept is None:
            self._keep_last_idle()
        self.warm_reuse = {**self.warm_reuse, "idle_reused_after_seconds": None if kept is None
                           else round(time.monotonic() - kept.taken_at, 1)}

    def loaded_engine(self) -> tuple[Any, Any]:
        """What a campaign worker keeps of a load: the model and its tokenizer."""
        return self.model, self.tokenizer

    def check_derived_weights(self) -> None:
        """With ``self.derived``: the loaded weights are the parent run's (else ConfigError)."""
        if self.derived is not None:
            info = self.wrapper_info()
            self.derived.parent.check_weights(self.MODEL_NAME, {
                k: info[k] for k in ("embedded_model", "packaged_model")})

    def announce(self) -> None:
        """Print :meth:`start_line` once the model is ready."""
        print(self.start_line(), file=sys.stderr, flush=True)

    def start_line(self) -> str:
        """The one line printed at start (subclasses say what they add)."""
        return f"[{self.MODEL_NAME}] energy={self.metering.meter.source.name}"

    def header(self) -> str:
        """What this model adds to the lm-eval model it wraps (``config.<model>.adds``)."""
        return self.start_line()

    # the request methods --------------------------------------------------------------------
    def loglikelihood(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self._metered("loglikelihood", requests, disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self._metered("loglikelihood_rolling", requests, disable_tqdm)

    def generate_until(self, requests, disable_tqdm: bool = False):
        """Templated copies (``self.chat``), outside the window; then metered per task."""
        originals = list(requests)
        if self.chat is not None and self.chat.applies(self.tokenizer):
            base_apply = super().apply_chat_template  # not ours: that marks the run templated
            requests = self.chat.templated(originals, base_apply)
        return self._metered("generate_until", requests, disable_tqdm, originals)

    def _metered(self, request_type: str, requests: Sequence[Any], disable_tqdm: bool,
                 originals: Sequence[Any] | None = None) -> list:
        """``requests`` served per task in metered windows; ``originals``: as lm-eval made them."""
        def serve(group: list) -> list:
            return self.serve(request_type, group, disable_tqdm)

        self.check_requests(request_type, requests)
        if self.derived is None:
            answers = self.metering.run(request_type, requests, serve,
                                        world_size=self.world_size, extras=self.metering_extras)
        else:  # answers from the parent run where they may be (by the strings lm-eval logs)
            answers = self.derived.run(self.metering, request_type, requests, serve,
                                       world_size=self.world_size, extras=self.metering_extras,
                                       originals=originals)
        if request_type.startswith("loglikelihood"):
            refuse_undefined_scores(self.MODEL_NAME, answers)
        self.answer_log.add(requests, answers)
        return answers

    def check_requests(self, request_type: str, requests: Sequence[Any]) -> None:
        """Refuse what no request may run with, over every task's requests at once.

        Before any window: a fix it names then holds for the whole run, not only for the first
        task (a backend adds its checks; none here).
        """

    def serve(self, request_type: str, requests: list, disable_tqdm: bool) -> list:
        """One task's requests, inside its energy window: the lm-eval model's own method."""
        return getattr(super(), request_type)(requests, disable_tqdm=disable_tqdm)

    # lm-eval calls these only when the run itself applies a chat template
    def chat_template(self, chat_template: bool | str = False) -> str | None:  # noqa: D102
        if self.chat is not None:
            self.chat.mark_run_applies_template()
        return super().chat_template(chat_template)

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:  # noqa: D102
        if self.chat is not None:
            self.chat.mark_run_applies_template()
        return super().apply_chat_template(chat_history, add_generation_prompt)

    # reporting ------------------------------------------------------------------------------
    def metering_extras(self) -> dict[str, Any]:
        """What this backend adds to ``config.metering`` (precision, batch size, ...)."""
        return {}

    def reset_metering(self) -> None:
        """Start fresh windows (several conditions on one loaded model)."""
        self.metering.reset()
        self.answer_log.reset()
        if self.derived is not None:
            self.derived.reset()

    def execution_modes(self) -> dict[str, str]:
        """How each request type ran (:mod:`~lm_eval_ext.metering.modes`): lm-eval's own code."""
        return {"loglikelihood": "lm_eval_forward", "loglikelihood_rolling": "lm_eval_forward",
                "generate_until": "lm_eval_generate"}

    def metering_info(self) -> dict[str, Any]:
        """The ``config.metering`` block (every field: ``docs/hf-metered.md``).

        With ``self.derived``, ``derived`` holds each log-likelihood task's derivation record.
        ``execution_modes``: the mode of each request type that ran (``derived`` where every
        task of it took its answers from a parent run); ``execution_mode`` joins them.
        """
        info = self.metering.report({**self.metering_extras(), "warm": dict(self.warm_reuse)})
        self._keep_last_idle()
        if self.derived is not None:
            info["derived"] = self.derived.report(info["per_task"])
        ran: dict[str, bool] = {}  # request type -> every task of it derived
        for entry in (info.get("per_task") or {}).values():
            for request_type, part in (entry.get("request_types") or {}).items():
                derived = DERIVED_FLAG in (part.get("flags") or ())
                ran[request_type] = ran.get(request_type, True) and derived
        modes = self.execution_modes()
        parent = self.derived.parent.execution_mode if self.derived is not None else None
        derived_mode = f"derived({parent})" if parent else "derived"
        info["execution_modes"] = {t: derived_mode if derived else modes.get(t, "unknown")
                                   for t, derived in sorted(ran.items())}
        info["execution_mode"] = joined(info["execution_modes"])
        return info

    def _keep_last_idle(self) -> None:
        """Keep this run's latest idle sample for the next run of a campaign worker."""
        cuda, source = getattr(self, "_idle_key", ([], ""))
        samples = self.metering.meter.idle_samples
        WARM.keep_idle(cuda, source, samples[-1] if samples else None)

    def wrapper_info(self) -> dict[str, Any]:
        """Model class, what it adds, the weights' provenance and who applied the chat template."""
        tokenizer = getattr(self, "tokenizer", None)
        return {
            "model_class": self.MODEL_NAME,
            "adds": self.header(),
            "embedded_model": embedded_model.provenance() if self._embedded else None,
            "packaged_model": self._packaged,
            "chat_template_mode": self.chat.mode if self.chat is not None else None,
            "generation_chat_template_applied_by":
                self.chat.applied_by(tokenizer) if self.chat is not None else None,
            "generation_chat_template_sha256":
                self.chat.template_sha256(tokenizer) if self.chat is not None else None,
        }

    def get_model_info(self) -> dict[str, Any]:
        """The model class's own info (if any), ``metering`` and this model's own block."""
        base = getattr(super(), "get_model_info", None)
        info = dict(base()) if base is not None else {}
        info["metering"] = self.metering_info()
        info[CONFIG_KEY] = self.answer_log.report()
        if self.INFO_KEY is not None:
            info[self.INFO_KEY] = self.wrapper_info()
        return info


def refuse_undefined_scores(model: str, answers: Sequence[Any]) -> None:
    """NaN log-likelihoods (activations that overflowed, e.g. fp16) stop the run in one line.

    lm-eval would score them: the argmax over NaN picks the first option, a full metrics table
    of answers no model gave.
    """
    scores = [answer[0] if isinstance(answer, tuple) else answer for answer in answers]
    undefined = sum(1 for score in scores if isinstance(score, float) and math.isnan(score))
    if undefined:
        raise ConfigError(f"{model}: {undefined} of {len(scores)} log-likelihoods are NaN (the "
                          "model's numbers overflowed, e.g. at precision=fp16); nothing was "
                          "saved: run at precision=bf16 or fp32")
