"""``hf-metered``: lm-eval's HF model with an embedded default and chat-template default.

``lm_eval --model hf-metered`` with no ``pretrained`` runs the embedded SmolLM2-135M-Instruct
(:mod:`lm_eval_ext.model_wrappers.embedded_model`). Every other HFLM ``--model_args`` key
works as with ``--model hf``.

Model args added here:
    chat_template: ``auto`` (default) or ``off``. With ``auto``, when the run does not
        already apply a chat template (``--apply_chat_template``), each *generation* request
        is sent as one user turn through the tokenizer's chat template (the seed paper's
        protocol for instruct models); the logged prompt is the templated one.
        Log-likelihood requests are left as plain text, as lm-eval does by default.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.model_wrappers import embedded_model

CHAT_TEMPLATE_MODES = ("auto", "off")
_TEMPLATED = "_lm_eval_ext_chat_templated"


@register_model("hf-metered")
class HFMeteredLM(HFLM):
    """HFLM subclass; see the module docstring for its extra model args."""

    def __init__(self, pretrained: Any = None, chat_template: str = "auto", **kwargs: Any):
        if chat_template not in CHAT_TEMPLATE_MODES:
            raise ConfigError(
                f"hf-metered: chat_template={chat_template!r} is not valid; use one of "
                f"{', '.join(CHAT_TEMPLATE_MODES)}"
            )
        self._chat_template_mode = chat_template
        self._run_applies_chat_template = False
        self._embedded = pretrained is None
        if self._embedded:
            pretrained = str(embedded_model.ensure_checkpoint())
        super().__init__(pretrained=pretrained, **kwargs)

    # lm-eval calls chat_template() (simple_evaluate) and apply_chat_template() (request
    # building) only when the run itself applies a chat template.
    def chat_template(self, chat_template: bool | str = False) -> str | None:  # noqa: D102
        self._run_applies_chat_template = True
        return super().chat_template(chat_template)

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:  # noqa: D102
        self._run_applies_chat_template = True
        return super().apply_chat_template(chat_history, add_generation_prompt)

    def _should_template_generation(self) -> bool:
        return (
            self._chat_template_mode == "auto"
            and not self._run_applies_chat_template
            and getattr(self.tokenizer, "chat_template", None) is not None
        )

    def _template_in_place(self, requests: list) -> None:
        for request in requests:
            if getattr(request, _TEMPLATED, False):
                continue  # the same Instance appears once per repeat
            context, gen_kwargs = request.arguments
            templated = HFLM.apply_chat_template(
                self, [{"role": "user", "content": context}], add_generation_prompt=True
            )
            request.arguments = (templated, gen_kwargs)
            setattr(request, _TEMPLATED, True)

    def generate_until(self, requests, disable_tqdm: bool = False):  # noqa: D102
        if self._should_template_generation():
            self._template_in_place(requests)
        return super().generate_until(requests, disable_tqdm=disable_tqdm)

    def get_model_info(self) -> dict:  # noqa: D102
        info = super().get_model_info()
        info["hf_metered"] = {
            "embedded_model": embedded_model.provenance() if self._embedded else None,
            "chat_template_mode": self._chat_template_mode,
            "generation_chat_template_applied_by": (
                "lm_eval" if self._run_applies_chat_template
                else "hf-metered" if self._should_template_generation() else None
            ),
        }
        return info
