"""Shared-prefix multiple-choice scoring: one forward per item instead of one per option.

lm-eval scores each option of a multiple-choice item as its own sequence that repeats the
whole context. Here the requests that share a context are packed into one row: the context
once, then every option's tokens after it. A 4-D attention mask lets each option see the
context and its own earlier tokens only, and per-option position ids restart where the
context ends, so each option is computed as if it followed the context alone (the row
layout: :mod:`~lm_eval_ext.backends.hf.packing`). Only the hidden states at the positions
that predict option tokens go through the output head. The answer per request is lm-eval's
``(sum of log-probabilities, is_greedy)``.

:class:`SharedPrefixScorer` does the work; hf-metered holds one and routes lm-eval's seam
(``_loglikelihood_tokens``, plus batched tokenisation) through it; ``support_problem`` says which
models cannot take the packed mask (they use the standard path, and the run's
``config.metering.mc_scoring`` says why). Before the first packed batch, the first item is also
scored the standard way and compared (``self_check``): a model whose attention ignores the
custom mask falls back instead of returning wrong numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from lm_eval_ext.backends.hf.packing import (
    PackedBatch,
    PackedItem,
    attention_mask,
    group_by_context,
    pack,
    split_to_fit,
)
from lm_eval_ext.errors import check_choice
from lm_eval_ext.generation.attention import MASKABLE_ATTENTION, attention_kernel

MC_SCORING = ("standard", "shared_prefix")

#: config keys that make the model's head more than ``lm_head(hidden)``, or attention not plain
UNSUPPORTED_CONFIG = ("final_logit_softcapping", "logit_scale", "logits_scaling")
#: self-check tolerance on a log-likelihood (nats), by compute dtype
SELF_CHECK_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6}
HALF_TOLERANCE = 0.25
def support_problem(model: Any, backend: str) -> str | None:
    """Why this model cannot be scored with a packed mask (None: it can)."""
    config = getattr(model, "config", None)
    if backend != "causal":
        return f"backend {backend!r} is not a decoder-only (causal) model"
    attention = attention_kernel(model)
    if attention not in MASKABLE_ATTENTION:
        return (f"attention implementation {attention!r} does not take a custom 4-D mask "
                f"(supported: {', '.join(MASKABLE_ATTENTION)})")
    for key in UNSUPPORTED_CONFIG:
        if getattr(config, key, None) not in (None, 1, 1.0):
            return f"config.{key} is set: the output head is not a plain linear layer"
    if getattr(config, "sliding_window", None) or any(
            t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window or non-attention layers: a packed row would change what they see"
    if not hasattr(model, "get_decoder") or model.get_output_embeddings() is None:
        return "the model exposes no decoder/output-head split"
    return None


def self_check_tolerance(dtype: torch.dtype) -> float:
    """How far a packed log-likelihood may sit from the standard one in ``dtype``."""
    return SELF_CHECK_TOLERANCE.get(dtype, HALF_TOLERANCE)


def batch_encoded(lm: ScoredModel, pairs: Sequence[tuple[str, str]],
                  tok_encode: Callable[..., list[int]]) -> dict[tuple[str, Any], list[int]]:
    """The ``tok_encode`` calls lm-eval will make for these (context, continuation) pairs.

    The strings are the ones lm-eval's ``loglikelihood``/``_encode_pair`` encode (empty
    context: the continuation without special tokens; else context and context +
    continuation after moving the context's trailing spaces), encoded in one batched
    tokenizer call per special-token setting. A key lm-eval does not ask for is never used,
    and a string lm-eval asks for that is missing is encoded the usual way; two entries are
    checked against lm-eval's own ``tok_encode`` (an empty dict if they differ).
    """
    from lm_eval.models.utils import _add_special_kwargs, has_bos_prefix

    wanted: set[tuple[str, Any]] = set()
    for context, continuation in pairs:
        if context == "":
            wanted.add((continuation, False))
            continue
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        wanted |= {(context + continuation, None), (context, None)}
    prefix = lm.tokenizer.decode(lm.prefix_token_id)
    groups: dict[tuple, list[tuple[str, Any]]] = {}
    for key in wanted:
        string, add_special = key
        settings = _add_special_kwargs(add_special, lm.add_bos_token)
        if add_special is None and has_bos_prefix(string, prefix):
            settings["add_special_tokens"] = False
        groups.setdefault(tuple(sorted(settings.items())), []).append(key)
    encoded: dict[tuple[str, Any], list[int]] = {}
    for settings, keys in groups.items():
        ids = lm.tokenizer([k[0] for k in keys], **dict(settings))["input_ids"]
        encoded.update(zip(keys, ids, strict=True))
    for key in list(encoded)[:2]:
        if encoded[key] != tok_encode(*key):
            return {}
    return encoded


@dataclasses.dataclass
class SharedPrefixStats:
    """What shared-prefix scoring did in a run (``config.metering.mc_scoring``)."""

    requested: str = "standard"
    used: str = "standard"
    fallback_reason: str | None = None
    items_packed: int = 0
    requests_packed: int = 0
    requests_standard: int = 0
    self_check_max_abs_diff: float | None = None
    self_check_tolerance: float | None = None

    def policy(self) -> str:
        """What happens to log-likelihood requests (the start-up header's words)."""
        if self.requested == "standard":
            return "log-likelihood requests unchanged"
        if self.used == "shared_prefix":
            return ("log-likelihood options that share a context are scored in one packed "
                    "forward (mc_scoring=shared_prefix)")
        return f"mc_scoring=shared_prefix not used: {self.fallback_reason}"




#: forward clock: ``timed(call, *args)`` runs ``call`` and credits its time as forward time
Timed = Callable[..., Any]
#: lm-eval's own ``_loglikelihood_tokens(requests, disable_tqdm, override_bs)``
Standard = Callable[[list, bool, "int | None"], list]


class ScoredModel(Protocol):
    """What the scorer uses of lm-eval's HF model (``HFLM``)."""

    model: Any  # a transformers causal LM
    tokenizer: Any
    backend: str
    device: torch.device
    batch_size: int | str
    max_length: int
    prefix_token_id: int
    add_bos_token: bool | None
    mixed_precision_dtype: torch.dtype | None
    softmax_dtype: torch.dtype | None
    cache_hook: Any

    def _detect_batch_size(self, requests: Any = None, pos: int = 0) -> int: ...


class SharedPrefixScorer:
    """Packed scoring for one lm-eval HF model (``mc_scoring=shared_prefix``).

    Args:
        mc_scoring: ``standard`` (lm-eval's path) or ``shared_prefix`` (validated here, before
            any model is loaded).
        model_name: Named in the fallback message.
        timed: The forward clock every packed forward goes through.
    """

    def __init__(self, mc_scoring: str, model_name: str, timed: Timed):
        check_choice("model arg mc_scoring", mc_scoring, MC_SCORING)
        self.stats = SharedPrefixStats(requested=mc_scoring, used=mc_scoring)
        self.model_name = model_name
        self._timed = timed
        self._lm: Any = None  # a ScoredModel once attached
        self._self_checked = False
        self._encoded: dict[tuple[str, Any], list[int]] = {}  # this request list's tokens

    @property
    def active(self) -> bool:
        """Whether log-likelihood requests are packed (requested, supported, not fallen back)."""
        return self.stats.used == "shared_prefix"

    def attach(self, lm: ScoredModel) -> None:
        """Bind the loaded lm-eval HF model; fall back at once if it cannot take the mask."""
        self._lm = lm
        if self.active:
            problem = support_problem(lm.model, lm.backend)
            if problem:
                self._fall_back(problem)

    def _fall_back(self, reason: str) -> None:
        self.stats.used, self.stats.fallback_reason = "standard", reason
        print(f"[{self.model_name}] mc_scoring=shared_prefix not used: {reason}",
              file=sys.stderr, flush=True)

    # tokenisation: one batched tokenizer call per request list instead of two per request
    def loglikelihood(self, requests: Sequence[Any], call: Callable[[], list],
                      tok_encode: Callable[..., list[int]]) -> list:
        """``call()`` (lm-eval's ``loglikelihood``) with this list's tokens encoded at once."""
        if not self.active:
            return call()
        with self.batch_tokens(requests, tok_encode):
            return call()

    @contextlib.contextmanager
    def batch_tokens(self, requests: Sequence[Any],
                     tok_encode: Callable[..., list[int]]) -> Iterator[None]:
        """Within the block, :meth:`encoded` answers from one batched encoding of ``requests``.

        ``tok_encode`` is lm-eval's own (it checks two of the batch's encodings).
        """
        self._encoded = batch_encoded(self._lm, [r.args for r in requests], tok_encode)
        try:
            yield
        finally:
            self._encoded = {}

    def encoded(self, string: str, add_special_tokens: bool | None,
                left_truncate_len: int | None) -> list[int] | None:
        """The batch-encoded tokens of ``string`` (None: not encoded, ask the tokenizer)."""
        cached = self._encoded.get((string, add_special_tokens))
        if cached is None:
            return None
        return list(cached[-left_truncate_len:] if left_truncate_len else cached)

    def loglikelihood_tokens(self, requests: list, disable_tqdm: bool, override_bs: int | None,
                             standard: Standard) -> list:
        """lm-eval's ``_loglikelihood_tokens`` answers, packed where the items fit."""
        if not self.active or not requests:
            self.stats.requests_standard += len(requests)
            return standard(requests, disable_tqdm, override_bs)
        lm = self._lm
        items = [row for item in group_by_context(requests) for row in split_to_fit(item)]
        limit = lm.max_length  # a property that reads the model config: once per call
        fits = [i for i in items if i.length <= limit
                and len(i.context) + max(len(o) for o in i.options) <= limit + 1]
        if not self._self_checked and fits:
            self._self_checked = True
            if not self._self_check(requests, fits[0], standard):
                return self.loglikelihood_tokens(requests, disable_tqdm, override_bs, standard)
        answers: list[tuple[float, bool] | None] = [None] * len(requests)
        packed = {id(i) for i in fits}
        rest = [index for i in items if id(i) not in packed for index in i.request_indices]
        if rest:  # too long to pack: lm-eval's own path (it truncates from the left)
            self.stats.requests_standard += len(rest)
            for index, answer in zip(rest, standard([requests[j] for j in rest], disable_tqdm,
                                                    override_bs), strict=True):
                answers[index] = answer
        ordered = sorted(fits, key=lambda i: -i.length)
        batch = self._batch_size(override_bs, ordered[0].length) if ordered else 1
        for start in range(0, len(ordered), batch):
            chunk = ordered[start:start + batch]
            scores = self._score(chunk)
            for item, item_scores in zip(chunk, scores, strict=True):
                for index, answer in zip(item.request_indices, item_scores, strict=True):
                    answers[index] = answer
                    if requests[index][0] is not None:
                        lm.cache_hook.add_partial("loglikelihood", requests[index][0], answer)
        self.stats.items_packed += len(fits)
        self.stats.requests_packed += sum(len(i.options) for i in fits)
        return answers

    def _batch_size(self, override_bs: int | None, longest: int) -> int:
        """Packed rows (items) per forward: the run's batch size, or the detected one.

        ``auto`` probes once per request list, with sequences as long as its longest row
        (lm-eval's own path probes with its longest request the same way).
        """
        lm = self._lm
        if lm.batch_size != "auto":
            return int(lm.batch_size)
        if override_bs:
            return int(override_bs)
        probe = [(None, [0] * longest, [0])]  # context + continuation - 1 = longest tokens
        return int(lm._detect_batch_size(probe, 0))

    def _logits(self, batch: PackedBatch) -> torch.Tensor:
        """The model's logits at the scored positions only: (N, vocab)."""
        lm = self._lm
        model = lm.model
        dtype = model.get_input_embeddings().weight.dtype
        mask = attention_mask(batch.segments, lm.mixed_precision_dtype or (
            dtype if dtype.is_floating_point else torch.float16))
        with torch.no_grad(), torch.autocast(device_type=lm.device.type,
                                             dtype=lm.mixed_precision_dtype,
                                             enabled=lm.mixed_precision_dtype is not None):
            hidden = model.get_decoder()(input_ids=batch.tokens, attention_mask=mask,
                                         position_ids=batch.positions).last_hidden_state
            return model.get_output_embeddings()(hidden[batch.rows, batch.columns])

    def _score(self, items: Sequence[PackedItem]) -> list[list[tuple[float, bool]]]:
        """(log-likelihood, is_greedy) of every option of every item, one forward.

        Log-probabilities and their sums use the dtype lm-eval's own path uses
        (``softmax_dtype``, else the logits' dtype), so the two paths differ only in the
        attention layout.
        """
        lm = self._lm
        pad = lm.tokenizer.pad_token_id
        batch = pack(items, 0 if pad is None else pad, lm.device)
        logits = self._timed(self._logits, batch)
        logprobs = F.log_softmax(logits, dim=-1, dtype=lm.softmax_dtype)
        chosen = logprobs.gather(1, batch.targets[:, None])[:, 0]
        greedy = logprobs.argmax(dim=-1) == batch.targets
        sums = torch.stack([s.sum() for s in torch.split(chosen, batch.option_lengths)])
        hits = torch.stack([h.all() for h in torch.split(greedy, batch.option_lengths)])
        flat = list(zip(sums.float().tolist(), hits.tolist(), strict=True))
        out, at = [], 0
        for item in items:
            out.append([(float(s), bool(g)) for s, g in flat[at:at + len(item.options)]])
            at += len(item.options)
        return out

    def _self_check(self, requests: list, item: PackedItem, standard: Standard) -> bool:
        """Score ``item`` both ways; fall back to the standard path if they disagree."""
        mine = [requests[i] for i in item.request_indices]
        reference = standard(mine, True, len(mine))  # override_bs: no batch-size probe
        packed = self._score([item])[0]
        diff = max(abs(a[0] - b[0]) for a, b in zip(reference, packed, strict=True))
        tolerance = self_check_tolerance(self._lm.model.get_input_embeddings().weight.dtype)
        self.stats.self_check_max_abs_diff = diff
        self.stats.self_check_tolerance = tolerance
        if diff > tolerance:
            self._fall_back(f"self-check: the first item's packed log-likelihoods differ from "
                            f"the standard path's by {diff:.3g} > {tolerance:g} nats")
            return False
        return True

