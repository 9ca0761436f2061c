"""Fast generation: finished sequences leave the batch (transformers' continuous batching).

lm-eval generates a batch of prompts until its longest answer ends (or ``max_gen_toks``), so a
batch of short answers waits for its longest one, and its batch size comes from a probe at the
model's maximum length. ``generation=fast`` hands all greedy requests of a task to
``model.generate_batch`` instead: transformers' continuous-batching manager, which admits new
prompts as soon as others finish and sizes its batches by a token budget. Everything around the
model call is lm-eval's own: the contexts are encoded by lm-eval's ``tok_batch_encode`` (its
truncation to ``max_length - max_gen_toks``), the new tokens decoded by its ``tok_decode`` and
cut at the stop sequences by its ``postprocess_generated_text``. Greedy decoding does not depend
on when a sequence stops, so cutting at a stop sequence after generation gives lm-eval's text.

The standard path still runs, with the reason recorded in ``config.metering.generation``, for
sampling or other generation kwargs, seq2seq models, ``mixed_precision_dtype``, integer
``think_end_token``, a model spread over several devices, and a transformers without
``generate_batch``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from lm_eval.models.utils import (
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)

from lm_eval_ext.errors import check_choice

GENERATION = ("standard", "fast")
#: generation kwargs the fast path reproduces (after lm-eval's normalisation): greedy only
GREEDY_KWARGS = ("do_sample", "temperature")
#: contexts per ``tok_batch_encode`` call (bounds the padded tensor)
ENCODE_CHUNK = 256

Standard = Callable[[list, bool], list[str]]


@dataclasses.dataclass
class FastGenerationStats:
    """What the generation path did (``config.metering.generation``)."""

    requested: str = "standard"
    fast_requests: int = 0
    standard_requests: int = 0
    fallback_reasons: list[str] = dataclasses.field(default_factory=list)

    def policy(self) -> str:
        """A phrase for the start-up header."""
        if self.requested == "standard":
            return "generation requests through lm-eval's own loop"
        return ("greedy generation requests through transformers' continuous batching "
                "(generation=fast; other requests: lm-eval's loop)")


def model_problem(lm: Any) -> str | None:
    """Why this model generates through lm-eval's loop even with ``generation=fast``."""
    if getattr(lm, "backend", "causal") != "causal":
        return f"backend {lm.backend!r} is not a decoder-only (causal) model"
    if getattr(lm, "mixed_precision_dtype", None) is not None:
        return "mixed_precision_dtype is set (lm-eval autocasts its own generate call)"
    if isinstance(getattr(lm, "think_end_token", None), int):
        return "an integer think_end_token (lm-eval strips thinking by token)"
    if not hasattr(lm.model, "generate_batch"):
        return "this transformers has no generate_batch (continuous batching)"
    devices = {str(d) for d in (getattr(lm.model, "hf_device_map", None) or {}).values()}
    if len(devices) > 1:
        return f"the model is spread over several devices ({', '.join(sorted(devices))})"
    return None


def kwargs_problem(kwargs: dict[str, Any]) -> str | None:
    """Why these (normalised) generation kwargs need lm-eval's loop (None: greedy)."""
    other = sorted(set(kwargs) - set(GREEDY_KWARGS))
    if other:
        return f"generation kwargs {', '.join(other)}"
    if kwargs.get("do_sample") or kwargs.get("temperature") not in (None, 0, 0.0):
        return "sampling (do_sample/temperature)"
    return None


class FastGenerator:
    """Runs ``generate_until`` requests through continuous batching; owns ``generation``."""

    def __init__(self, mode: str, model_name: str):
        check_choice(f"{model_name}: model arg generation", mode, GENERATION)
        self.stats = FastGenerationStats(requested=mode)

    def _fall_back(self, reason: str) -> None:
        if reason not in self.stats.fallback_reasons:
            self.stats.fallback_reasons.append(reason)

    def generate_until(self, lm: Any, requests: Sequence[Any], disable_tqdm: bool,
                       standard: Standard) -> list[str]:
        """lm-eval's answers for ``requests``, in their order."""
        requests = list(requests)
        problem = None if self.stats.requested == "standard" else model_problem(lm)
        if self.stats.requested == "standard" or problem:
            if problem:
                self._fall_back(problem)
            self.stats.standard_requests += len(requests)
            return standard(requests, disable_tqdm)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            key = json.dumps(request.args[1], sort_keys=True, default=str)
            groups.setdefault(key, []).append(index)
        results: list[str | None] = [None] * len(requests)
        for indices in groups.values():
            group = [requests[i] for i in indices]
            texts = self._group(lm, group, disable_tqdm, standard)
            for index, text in zip(indices, texts, strict=True):
                results[index] = text
        return results

    def _group(self, lm: Any, group: list, disable_tqdm: bool, standard: Standard) -> list[str]:
        """One set of generation kwargs: fast when greedy, else lm-eval's loop."""
        gen_kwargs = group[0].args[1]
        kwargs = normalize_gen_kwargs(copy.deepcopy(gen_kwargs), lm.max_gen_toks)
        eos = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
        max_gen_toks = kwargs.pop("max_gen_toks")
        problem = kwargs_problem(kwargs)
        if problem:
            self._fall_back(problem)
            self.stats.standard_requests += len(group)
            return standard(group, disable_tqdm)
        contexts = [request.args[0] for request in group]
        tokens = self._generate(lm, contexts, max_gen_toks)
        texts = []
        for context, new_tokens in zip(contexts, tokens, strict=True):
            text = postprocess_generated_text(
                generation=lm.tok_decode(new_tokens), stop=until,
                think_end_token=lm.think_end_token if isinstance(lm.think_end_token, str)
                else None)
            lm.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            texts.append(text)
        self.stats.fast_requests += len(group)
        return texts

    @staticmethod
    def _generate(lm: Any, contexts: list[str], max_gen_toks: int) -> list[list[int]]:
        """The new tokens of each context (greedy), through ``model.generate_batch``."""
        max_context = lm.max_length - max_gen_toks
        inputs: list[list[int]] = []
        for start in range(0, len(contexts), ENCODE_CHUNK):
            encoded, mask = lm.tok_batch_encode(contexts[start:start + ENCODE_CHUNK],
                                                left_truncate_len=max_context,
                                                truncation=lm.truncation)
            inputs += [row[keep.bool()].tolist() for row, keep in zip(encoded, mask, strict=True)]
        config = copy.deepcopy(lm.model.generation_config)
        config.update(max_new_tokens=max_gen_toks, do_sample=False, num_beams=1,
                      num_return_sequences=1, pad_token_id=lm.tokenizer.pad_token_id)
        attention = lm.model.config._attn_implementation
        try:
            out = lm.metering.timed(lm.model.generate_batch, inputs=inputs,
                                    generation_config=config, progress_bar=False)
        finally:
            if lm.model.config._attn_implementation != attention:
                lm.model.set_attn_implementation(attention)  # for the requests that follow
        by_index = {int(key.rsplit("_", 1)[-1]): value for key, value in out.items()}
        return [list(by_index[i].generated_tokens) for i in range(len(inputs))]


class FastGeneration:
    """Mixin over lm-eval's HF model: ``generate_until`` through :class:`FastGenerator`.

    Place it after the metering mixin (the fast path then runs inside the task's energy window)
    and before ``HFLM``.
    """

    @classmethod
    def check_own_model_args(cls, args: dict[str, Any]) -> None:
        """``generation``'s value (for a dry run; the generator checks it again at load)."""
        check_choice("model arg generation", args.get("generation", "standard"), GENERATION)

    def __init__(self, *args: Any, generation: str = "standard", **kwargs: Any):
        self.fast_generation = FastGenerator(generation,
                                             getattr(self, "MODEL_NAME", type(self).__name__))
        super().__init__(*args, **kwargs)

    def generate_until(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self.fast_generation.generate_until(self, requests, disable_tqdm,
                                                   super().generate_until)
