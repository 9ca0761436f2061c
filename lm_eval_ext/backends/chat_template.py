"""hf-metered's chat-template policy for generation requests.

``chat_template=auto`` (the default): a generation request goes through the tokenizer's chat
template as one user turn, unless the run itself passes ``--apply_chat_template`` (then lm-eval
templates, and nothing is done twice) or the tokenizer has no template (a base model: prompts go
as they are, and the run's info says so). ``chat_template=off`` sends exactly what ``--model hf``
sends. Log-likelihood requests are never templated.

The policy works on copies: lm-eval's CachingLM hashes each request before and after the call
and the samples log shows them, so neither may see a change made behind the user's back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from lm_eval_ext.errors import check_choice

CHAT_TEMPLATE_MODES = ("auto", "off")


class ChatTemplatePolicy:
    """Decides whether generation requests are templated, and makes the templated copies.

    Args:
        mode: ``auto`` or ``off`` (validated here).
        model_name: Who applies the template, as recorded in the run's info.
    """

    def __init__(self, mode: str, model_name: str):
        check_choice("model arg chat_template", mode, CHAT_TEMPLATE_MODES)
        self.mode = mode
        self.model_name = model_name
        self.run_applies_template = False  # set once lm-eval asks for the template itself

    def mark_run_applies_template(self) -> None:
        """lm-eval called ``chat_template()``/``apply_chat_template()``: the run templates."""
        self.run_applies_template = True

    def applies(self, tokenizer: Any) -> bool:
        """Whether this policy templates generation requests for ``tokenizer``."""
        return (self.mode == "auto" and not self.run_applies_template
                and getattr(tokenizer, "chat_template", None) is not None)

    def templated(self, requests: Sequence[Any],
                  apply: Callable[[list[dict[str, str]]], str]) -> list[Any]:
        """Copies of ``requests`` with the context templated by ``apply`` (one user turn).

        The same request object (lm-eval's data-parallel padding repeats one) maps to the same
        copy, so identity-based padding detection still works on the copies.
        """
        copies: dict[int, Any] = {}
        out = []
        for request in requests:
            if id(request) not in copies:
                context, gen_kwargs = request.arguments[:2]
                text = apply([{"role": "user", "content": context}])
                copies[id(request)] = dataclasses.replace(
                    request, arguments=(text, gen_kwargs, *request.arguments[2:]))
            out.append(copies[id(request)])
        return out

    def describe(self, tokenizer: Any = None) -> str:
        """The start-up header's words for this policy (for ``tokenizer`` when given)."""
        if (self.mode == "auto" and tokenizer is not None
                and getattr(tokenizer, "chat_template", None) is None):
            return ("the tokenizer has no chat template (a base model): prompts sent exactly as "
                    "--model hf sends them")
        if self.mode == "auto":
            return ("generation requests go through the tokenizer's chat template as one user "
                    "turn unless the run passes --apply_chat_template (chat_template=off: exactly "
                    "what --model hf sends)")
        return "prompts sent exactly as --model hf sends them (chat_template=off)"

    def template_sha256(self, tokenizer: Any) -> str | None:
        """The SHA-256 of the template this policy applied; None where it applied none.

        As lm-eval's ``chat_template_sha`` of the same template, when the run templates.
        """
        if not self.applies(tokenizer):
            return None
        template = tokenizer.chat_template
        text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def applied_by(self, tokenizer: Any) -> str | None:
        """Who templated generation requests in this run: lm_eval, this model, or nobody."""
        if self.run_applies_template:
            return "lm_eval"
        return self.model_name if self.applies(tokenizer) else None

