"""Fast generation: large length-sorted batches, stopped by token ids, cut afterwards.

lm-eval's generation loop checks its stop sequences by decoding every sequence's tail after
every new token (a tokenizer call per sequence per step), takes its batch size from a probe at
the model's maximum length, and runs at batch 1 unless told otherwise. ``generation=fast`` keeps
everything around the model call lm-eval's own (contexts encoded by its ``tok_batch_encode``
with its truncation to ``max_length - max_gen_toks``, new tokens decoded by its ``tok_decode``
and cut at the stop sequences by its ``postprocess_generated_text``) and changes these things:

* the contexts of a task are sorted by length and generated in batches sized to the memory
  (CUDA: the KV cache and activations of the longest prompt plus ``max_gen_toks`` in half the
  free memory; CPU: :data:`CPU_BATCH`); a batch size the user gave caps it (a typed
  ``--batch_size 1`` too; lm-eval's untyped default of 1 does not, see
  ``explicit_batch_size`` of :mod:`lm_eval_ext.backends.model_args`); an out-of-memory
  halves it and retries;
* on a CPU the prompts' common prefix (chat template, instructions) is run once per batch and
  its cache copied to every row, and all batches are decoded as one pool in which a batch's
  rows join the previous batch's last running ones
  (:func:`~lm_eval_ext.generation.greedy.pooled_greedy_decode`);
* a sequence stops on the model's end-of-sequence tokens and on transformers' token-level
  ``StopStringCriteria``, not on a per-step decode, and then leaves the batch
  (:mod:`~lm_eval_ext.generation.greedy`: each step costs what the unfinished
  sequences cost);
* on a GPU, a model in full precision decodes from a static KV cache with its decode step
  replayed as one CUDA graph, the batch cut to its running rows once most have ended
  (:mod:`~lm_eval_ext.generation.graphed`; model arg
  ``cuda_graphs=false`` keeps the dynamic cache, which quantized and sliding-window models
  always use, the reason recorded);
* the text is cut at lm-eval's stop sequences afterwards. Greedy decoding does not depend on
  when a sequence stops, so the text is the one lm-eval's loop would give at that batch.

The standard loop still runs, with the reason in ``config.metering.generation``, for sampling
or other generation kwargs, seq2seq models, ``mixed_precision_dtype``, an integer
``think_end_token`` and a model spread over several devices. (transformers' continuous batching,
``generate_batch``, was tried first and was slower on both machines:
``benchmarks/results/gen_2026-12-01/gen_throughput_continuous_batching.json``.)
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from lm_eval.models.utils import (
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from transformers.generation.stopping_criteria import StopStringCriteria

from lm_eval_ext.errors import check_choice
from lm_eval_ext.generation.graphed import (
    DecodeGraphs,
    StaticDecodeResult,
    static_decode_problem,
    static_greedy_decode,
)
from lm_eval_ext.generation.greedy import (
    eos_token_ids,
    greedy_decode,
    pooled_greedy_decode,
)

GENERATION = ("standard", "fast")
#: the default path: fast (same text as lm-eval's loop in fp32; measured in docs/hf-metered.md)
DEFAULT_GENERATION = "fast"
#: generation kwargs the fast path reproduces (after lm-eval's normalisation): greedy only
GREEDY_KWARGS = ("do_sample", "temperature")
#: contexts per ``tok_batch_encode`` call (bounds the padded tensor)
ENCODE_CHUNK = 256
#: batch size on the CPU: each decode step reads every weight, and a larger batch shares the
#: read; a longer batch pads its prompts more (the headline as typed: docs/hf-metered.md)
CPU_BATCH = 32
#: on the CPU with a planned batch, the next batch's rows join once at most this many of the
#: running ones are left (a decode step at a few rows costs far more per row than one at many:
#: it reads every weight); a batch size the user typed is kept, batches then do not mix
CPU_ADMIT_AT = CPU_BATCH // 2
#: most sequences in one CUDA batch, and the share of free memory a batch may plan to use
MAX_CUDA_BATCH, MEMORY_SHARE = 1024, 0.5

Standard = Callable[[list, bool], list[str]]


class ForwardClock(Protocol):
    """The metering seam's forward clock (:meth:`lm_eval_ext.metering.Metering.timed`)."""

    def timed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102


class GeneratingModel(Protocol):
    """What the generator uses of lm-eval's HF model (``HFLM``) and its metering seam."""

    model: Any  # a transformers causal LM
    tokenizer: Any
    backend: str
    device: torch.device
    max_length: int
    max_gen_toks: int
    truncation: bool
    eot_token_id: int
    think_end_token: str | int | None
    mixed_precision_dtype: torch.dtype | None
    cache_hook: Any
    metering: ForwardClock

    def tok_decode(self, tokens: Any, skip_special_tokens: bool = True) -> str: ...  # noqa: D102

    def tok_batch_encode(self, strings: list[str], padding_side: str = "left",  # noqa: D102
                         left_truncate_len: int | None = None,
                         truncation: bool = False) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclasses.dataclass
class FastGenerationStats:
    """What the generation path did (``config.metering.generation``)."""

    requested: str = "standard"
    batch_size_asked: int | None = None  # the user's cap (None: planned from the memory)
    fast_requests: int = 0
    standard_requests: int = 0
    fallback_reasons: list[str] = dataclasses.field(default_factory=list)
    batch_sizes: list[int] = dataclasses.field(default_factory=list)  # planned, per task group
    out_of_memory_retries: int = 0
    cuda_graphs: bool | None = True  # asked for (static cache + CUDA-graph decode where it
    # holds); None on a model that is not on a GPU, where it does not apply
    graph_batches: int = 0  # batches decoded by CUDA-graph replays
    graph_compactions: int = 0  # times such a batch was cut to its running rows
    graph_reuses: int = 0  # batches that replayed an earlier batch's graph (no capture)
    eager_batches: int = 0  # batches decoded step by step (every batch on a CPU)
    eager_reasons: list[str] = dataclasses.field(default_factory=list)  # on a GPU: why

    def policy(self) -> str:
        """A phrase for the start-up header."""
        if self.requested == "standard":
            return "generation requests through lm-eval's own loop"
        return ("greedy generation requests in length-sorted batches sized to the memory, "
                "stopped by token (generation=fast; other requests: lm-eval's loop)")


def model_problem(lm: GeneratingModel) -> str | None:
    """Why this model generates through lm-eval's loop even with ``generation=fast``."""
    if getattr(lm, "backend", "causal") != "causal":
        return f"backend {lm.backend!r} is not a decoder-only (causal) model"
    if getattr(lm, "mixed_precision_dtype", None) is not None:
        return "mixed_precision_dtype is set (lm-eval autocasts its own generate call)"
    if isinstance(getattr(lm, "think_end_token", None), int):
        return "an integer think_end_token (lm-eval strips thinking by token)"
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
    """Runs ``generate_until`` requests on the fast path; owns the ``generation`` model arg.

    Args:
        mode: ``fast`` or ``standard`` (validated here).
        model_name: The model type, for error messages.
        batch_size_asked: The batch size the user gave (every batch's size), or None.
        max_batch_size: A cap the user gave with ``--batch_size auto``, or None.
        cuda_graphs: On a GPU, decode from a static cache by CUDA-graph replays where the
            model allows it.
    """

    def __init__(self, mode: str, model_name: str, batch_size_asked: int | None = None,
                 max_batch_size: int | None = None, cuda_graphs: bool = True):
        check_choice(f"{model_name}: model arg generation", mode, GENERATION)
        self.stats = FastGenerationStats(requested=mode, batch_size_asked=batch_size_asked,
                                         cuda_graphs=cuda_graphs)
        self.max_batch_size = max_batch_size

    def reset_counts(self) -> None:
        """Fresh counts under the same settings (a new measurement on one loaded model)."""
        old = self.stats
        self.stats = FastGenerationStats(requested=old.requested,
                                         batch_size_asked=old.batch_size_asked,
                                         cuda_graphs=old.cuda_graphs)

    def _fall_back(self, reason: str) -> None:
        if reason not in self.stats.fallback_reasons:
            self.stats.fallback_reasons.append(reason)

    def _decode(self, lm: GeneratingModel, rows: list[list[int]], max_gen_toks: int,
                stop_strings: list[str], graphs: DecodeGraphs) -> list[list[int]]:
        """One batch's new tokens: CUDA-graph replays where they hold, else eager steps."""
        # why the batch is decoded step by step: None (graphs hold), a reason, "" off CUDA
        problem = (("cuda_graphs=false" if not self.stats.cuda_graphs
                    else static_decode_problem(lm.model))
                   if torch.device(lm.device).type == "cuda" else "")
        if problem is None:
            result = generate_static_batch(lm, rows, max_gen_toks, stop_strings, graphs)
            self.stats.graph_compactions += result.compactions
            self.stats.graph_reuses += result.reused
            problem, tokens = result.graph_problem, result.tokens  # failed capture: eager steps
        else:
            tokens = generate_batch(lm, rows, max_gen_toks, stop_strings)
        if problem is None:
            self.stats.graph_batches += 1
        else:
            self.stats.eager_batches += 1
            if problem and problem not in self.stats.eager_reasons:
                self.stats.eager_reasons.append(problem)
        return tokens

    def generate_until(self, lm: GeneratingModel, requests: Sequence[Any], disable_tqdm: bool,
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

    def _group(self, lm: GeneratingModel, group: list, disable_tqdm: bool, standard: Standard) -> list[str]:
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
        tokens = self._generate(lm, contexts, max_gen_toks, [u for u in until if u != eos])
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

    def _generate(self, lm: GeneratingModel, contexts: list[str], max_gen_toks: int,
                  stop_strings: list[str]) -> list[list[int]]:
        """The new tokens of each context (greedy), longest contexts first."""
        inputs = encoded_contexts(lm, contexts, lm.max_length - max_gen_toks)
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
        batch = planned_batch_size(lm, len(inputs[order[0]]) + max_gen_toks, len(inputs),
                                   self.stats.batch_size_asked, self.max_batch_size)
        self.stats.batch_sizes.append(batch)
        if torch.device(lm.device).type == "cpu":  # one pooled decode over all batches
            chunks = [order[i:i + batch] for i in range(0, len(order), batch)]
            # a batch size or cap the user gave bounds every step: then batches do not mix
            planned = self.stats.batch_size_asked is None and self.max_batch_size is None
            rows = generate_pooled(lm, [[inputs[i] for i in c] for c in chunks], max_gen_toks,
                                   stop_strings, CPU_ADMIT_AT if planned else 0)
            self.stats.eager_batches += len(chunks)
            flat = [i for chunk in chunks for i in chunk]
            out = dict(zip(flat, rows, strict=True))
            return [out[i] for i in range(len(inputs))]
        out = {}
        start = 0
        graphs = DecodeGraphs()  # a batch replays the previous one's graph where it fits
        while start < len(order):
            chunk = order[start:start + batch]
            try:
                rows = self._decode(lm, [inputs[i] for i in chunk], max_gen_toks,
                                    stop_strings, graphs)
            except torch.cuda.OutOfMemoryError:
                if batch == 1:
                    raise
                graphs.clear()
                torch.cuda.empty_cache()
                batch = max(1, batch // 2)
                self.stats.out_of_memory_retries += 1
                continue
            out.update(zip(chunk, rows, strict=True))
            start += len(chunk)
        return [out[i] for i in range(len(inputs))]


def generation_tokens(lm: GeneratingModel, requests: Sequence[Any]) -> int:
    """The longest prompt (as lm-eval encodes it) plus the largest ``max_gen_toks``."""
    new = max(normalize_gen_kwargs(copy.deepcopy(r.args[1]), lm.max_gen_toks)["max_gen_toks"]
              for r in requests)
    prompts = encoded_contexts(lm, [r.args[0] for r in requests], lm.max_length - new)
    return max(len(p) for p in prompts) + new


def encoded_contexts(lm: GeneratingModel, contexts: list[str], max_context: int) -> list[list[int]]:
    """Each context's token ids as lm-eval's loop feeds them (its encoding and truncation)."""
    inputs: list[list[int]] = []
    for start in range(0, len(contexts), ENCODE_CHUNK):
        encoded, mask = lm.tok_batch_encode(contexts[start:start + ENCODE_CHUNK],
                                            left_truncate_len=max_context,
                                            truncation=lm.truncation)
        inputs += [row[keep.bool()].tolist() for row, keep in zip(encoded, mask, strict=True)]
    return inputs


def planned_batch_size(lm: GeneratingModel, sequence_tokens: int, n_requests: int,
                       asked: int | None = None, cap: int | None = None) -> int:
    """Sequences per batch: the size ``asked`` for, else what fits; at most ``cap``.

    ``cap`` is a ``max_batch_size`` the user gave; what fits is CUDA memory's plan or CPU_BATCH.
    """
    planned = (min(asked, n_requests) if asked is not None
               else _fitting_batch_size(lm, sequence_tokens, n_requests))
    return min(planned, cap or planned)


def _fitting_batch_size(lm: GeneratingModel, sequence_tokens: int, n_requests: int) -> int:
    """What fits: the KV cache and activations in half the free CUDA memory; CPU_BATCH."""
    if lm.device.type != "cuda":
        return min(CPU_BATCH, n_requests)
    config = getattr(lm.model.config, "text_config", None) or lm.model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    element = torch.finfo(lm.model.dtype).bits // 8 if lm.model.dtype.is_floating_point else 2
    kv = 2 * config.num_hidden_layers * kv_heads * head_dim * element * sequence_tokens
    activations = sequence_tokens * (getattr(config, "intermediate_size", 4 * config.hidden_size)
                                     + 4 * config.hidden_size) * element
    logits = 2 * config.vocab_size * 4  # the last position's scores, fp32
    free, _ = torch.cuda.mem_get_info(lm.device)
    fits = int(MEMORY_SHARE * free // (kv + activations + logits))
    return max(1, min(MAX_CUDA_BATCH, n_requests, fits))


@functools.lru_cache(maxsize=16)
def stop_criterion(tokenizer: Any, stop_strings: tuple[str, ...]) -> StopStringCriteria:
    """The stop-string criterion for ``stop_strings``, built once per tokenizer and strings.

    Building one reads the whole vocabulary (about 0.13 s for the embedded model's 49,152
    tokens on a 2-core CPU): at batch 1 that was paid for every item.
    """
    return StopStringCriteria(tokenizer, list(stop_strings))


def _decode_inputs(lm: GeneratingModel, rows: list[list[int]], stop_strings: list[str]
                   ) -> tuple[torch.Tensor, torch.Tensor, list[int], Any]:
    """Padded ids and mask on the model's device, the end tokens and the stop criterion.

    ``rows`` are left-padded by the tokenizer; the criterion is None without stop strings.
    """
    batch = lm.tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    stop = stop_criterion(lm.tokenizer, tuple(stop_strings)) if stop_strings else None
    return (batch["input_ids"].to(lm.device), batch["attention_mask"].to(lm.device),
            eos_token_ids(lm.model, lm.tokenizer), stop)


def generate_batch(lm: GeneratingModel, rows: list[list[int]], max_gen_toks: int,
                   stop_strings: list[str]) -> list[list[int]]:
    """Greedy new tokens for ``rows`` from the dynamic cache (one timed decode)."""
    ids, mask, eos, stop = _decode_inputs(lm, rows, stop_strings)
    return lm.metering.timed(greedy_decode, lm.model, ids, mask, max_gen_toks, eos, stop)


def generate_static_batch(lm: GeneratingModel, rows: list[list[int]], max_gen_toks: int,
                          stop_strings: list[str], graphs: DecodeGraphs | None = None
                          ) -> StaticDecodeResult:
    """Greedy new tokens for ``rows`` by CUDA-graph replays from a static cache (one decode).

    ``graphs`` keeps the batch's graph for the next batch that fits it (and may hold one).
    """
    ids, mask, eos, stop = _decode_inputs(lm, rows, stop_strings)
    return lm.metering.timed(static_greedy_decode, lm.model, ids, mask, max_gen_toks, eos, stop,
                             graphs=graphs)


def generate_pooled(lm: GeneratingModel, batches: list[list[list[int]]], max_gen_toks: int,
                    stop_strings: list[str], admit_at: int) -> list[list[int]]:
    """Greedy new tokens for every row of ``batches`` in one timed, pooled decode (a CPU's).

    Each batch's common prefix runs once, and a batch's rows join the previous one's once at
    most ``admit_at`` of those still run (0: batch by batch;
    :func:`~lm_eval_ext.generation.greedy.pooled_greedy_decode`).
    """
    inputs = [_decode_inputs(lm, rows, stop_strings) for rows in batches]
    _, _, eos, stop = inputs[0]
    return lm.metering.timed(pooled_greedy_decode, lm.model,
                             [(ids, mask) for ids, mask, _, _ in inputs], max_gen_toks, eos,
                             stop, share_prefix=True, admit_at=admit_at)
