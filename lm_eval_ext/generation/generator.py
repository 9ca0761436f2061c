"""Fast generation: length-sorted batches sized to the memory, stopped by token, cut afterwards.

Around the model call everything is lm-eval's own (``tok_batch_encode`` and its truncation,
``tok_decode``, ``postprocess_generated_text``). The decode is :mod:`.greedy`'s (finished rows
leave the batch) and on a GPU :mod:`.graphed`'s (CUDA-graph replays). Sampling, other
generation kwargs and models it cannot take go through lm-eval's loop, the reason recorded.
Reference: docs/hf-metered.md (fast generation).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from lm_eval.models.utils import (
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from tqdm import tqdm
from transformers.generation.stopping_criteria import StopStringCriteria

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.generation.graphed import DecodeGraphs, StaticDecodeResult
from lm_eval_ext.generation.greedy import eos_token_ids
from lm_eval_ext.generation.settings import CPU_BATCH, Decoders, GenerationSettings

#: generation kwargs the fast path reproduces (after lm-eval's normalisation): greedy only
GREEDY_KWARGS = ("do_sample", "temperature")
#: contexts per ``tok_batch_encode`` call (bounds the padded tensor)
ENCODE_CHUNK = 256
#: most sequences in one CUDA batch, and the share of free memory a batch may plan to use
MAX_CUDA_BATCH, MEMORY_SHARE = 1024, 0.5

#: lm-eval's loop on some requests: ``(requests, disable_tqdm, batch_size)``, where
#: ``batch_size`` is the generator's plan for the loop under ``--batch_size auto`` (else None)
Standard = Callable[[list, bool, int | None], list[str]]


class MeteringSeam(Protocol):
    """What the generator uses of the metering seam (:class:`lm_eval_ext.metering.Metering`)."""

    def timed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102

    def excluded(self) -> AbstractContextManager[None]: ...  # noqa: D102


class GeneratingModel(Protocol):
    """What the generator uses of lm-eval's HF model (``HFLM``) and its metering seam."""

    model: Any  # a transformers causal LM
    tokenizer: Any
    backend: str
    batch_size: int | str  # lm-eval's: "auto" when its loop asks for a planned batch
    device: torch.device
    max_length: int
    max_gen_toks: int
    truncation: bool
    eot_token_id: int
    think_end_token: str | int | None
    mixed_precision_dtype: torch.dtype | None
    cache_hook: Any
    metering: MeteringSeam

    def tok_decode(self, tokens: Any, skip_special_tokens: bool = True) -> str: ...  # noqa: D102

    def tok_batch_encode(self, strings: list[str], padding_side: str = "left",  # noqa: D102
                         left_truncate_len: int | None = None,
                         truncation: bool = False) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclasses.dataclass
class FastGenerationStats:
    """What the generation path did (``config.metering.generation``, beside the settings)."""

    fast_requests: int = 0
    standard_requests: int = 0
    fallback_reasons: list[str] = dataclasses.field(default_factory=list)
    batch_sizes: list[int] = dataclasses.field(default_factory=list)  # planned, per task group
    out_of_memory_retries: int = 0
    graph_batches: int = 0  # batches decoded by CUDA-graph replays
    graph_compactions: int = 0  # times such a batch was cut to its running rows
    graph_reuses: int = 0  # batches that replayed an earlier batch's graph (no capture)
    eager_batches: int = 0  # batches decoded step by step (every batch on a CPU)
    eager_reasons: list[str] = dataclasses.field(default_factory=list)  # on a GPU: why


def generation_record(settings: GenerationSettings, stats: FastGenerationStats) -> dict[str, Any]:
    """``config.metering.generation``: the settings asked for and what the runs did."""
    return {**settings.recorded(), **dataclasses.asdict(stats)}


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


class NoRoomForPrompts(ConfigError):
    """A model length that cuts a prompt (or leaves it no token), with the fixes that work.

    Its message names lm-eval's flags; :meth:`line` names another command's (``judge``).
    """

    def __init__(self, max_length: int, max_gen_toks: int, need: int, room: int, cut: int,
                 prompts: int, asked: bool):
        self.max_length, self.max_gen_toks, self.need, self.room = (
            max_length, max_gen_toks, need, room)
        self.cut, self.prompts, self.asked = cut, prompts, asked
        super().__init__(self.line())

    def line(self, length_flag: str = "--model_args",
             new_tokens_flag: str = "--gen_kwargs max_gen_toks=N") -> str:
        """The refusal, naming ``length_flag`` and ``new_tokens_flag`` for the two settings."""
        fixes = [f"give max_length={self.need} or more (the longest of this run's "
                 f"{self.prompts} prompts and the tokens it may generate)",
                 *(["leave max_length out (the model's own)"] if self.asked else []),
                 *([f"lower max_gen_toks with {new_tokens_flag} (N at most {self.room})"]
                   if self.room >= 1 else [])]  # no N helps a prompt longer than max_length
        fix = fixes[0] if len(fixes) == 1 else f"{', '.join(fixes[:-1])}, or {fixes[-1]}"
        if self.max_gen_toks >= self.max_length:
            return (f"{length_flag} max_length={self.max_length} leaves no token of the prompt: "
                    f"the task generates up to max_gen_toks={self.max_gen_toks} tokens within "
                    f"it; {fix}")
        return (f"{length_flag} max_length={self.max_length} cuts {self.cut} of {self.prompts} "
                "prompts (lm-eval keeps max_length - max_gen_toks tokens of each, from the "
                f"end): {fix}")


def check_room_for_prompts(lm: GeneratingModel, requests: Sequence[Any]) -> None:
    """A model length that cuts a prompt: one line (:class:`NoRoomForPrompts`), before any run.

    lm-eval keeps ``max_length - max_gen_toks`` tokens of each prompt, from its end: its own loop
    asserts that this is positive, a negative count would cut the prompt from the wrong end, and
    a shorter one cuts the instruction and the context first, with a log warning, the cut item
    scored as if whole. A ``max_length`` the user gave must hold every prompt; the model's own
    must leave each some room.
    """
    if getattr(lm, "backend", "causal") != "causal":  # a seq2seq prompt is not cut so
        return
    keys = [json.dumps(r.args[1], sort_keys=True, default=str) for r in requests]
    limits = {key: normalize_gen_kwargs(copy.deepcopy(r.args[1]), lm.max_gen_toks)[
        "max_gen_toks"] for key, r in zip(keys, requests, strict=True)}  # once per setting
    new = [limits[key] for key in keys]
    no_room = max(new, default=0) >= lm.max_length
    asked = getattr(lm, "max_length_asked", None) is not None
    if not no_room and not asked:
        return
    lengths = [len(p) for p in encoded_contexts(lm, [r.args[0] for r in requests], 10**9)]
    cut = sum(n + g > lm.max_length for n, g in zip(lengths, new, strict=True))
    if no_room or cut:
        raise NoRoomForPrompts(
            lm.max_length, max(new), need=max(n + g for n, g in zip(lengths, new, strict=True)),
            room=lm.max_length - max(lengths), cut=cut, prompts=len(requests), asked=asked)


class FastGenerator:
    """Runs ``generate_until`` requests under fixed ``settings``, counting in ``self.stats``."""

    def __init__(self, settings: GenerationSettings):
        self.settings = settings
        self.stats = FastGenerationStats()

    def reset_counts(self) -> None:
        """Fresh counts under the same settings (a new measurement on one loaded model)."""
        self.stats = FastGenerationStats()

    def _standard(self, lm: GeneratingModel, reason: str | None, group: list, disable_tqdm: bool,
                  standard: Standard) -> list[str]:
        """``group`` through lm-eval's loop (``reason``: why, recorded once).

        Under ``--batch_size auto`` the loop's batch is planned here for these requests: lm-eval's
        own probe runs a batch at the model's maximum length, far longer than a prompt plus
        ``max_gen_toks``, and so picks a batch several times too small for generation.
        """
        if reason and reason not in self.stats.fallback_reasons:
            self.stats.fallback_reasons.append(reason)
        self.stats.standard_requests += len(group)
        batch = None
        if lm.batch_size == "auto" and group:
            tokens = generation_tokens(lm, group)
            with lm.metering.excluded():  # where lm-eval's own probe would run
                batch = planned_batch_size(lm, tokens, len(group), cap=self.settings.max_batch_size)
        return standard(group, disable_tqdm, batch)

    def generate_until(self, lm: GeneratingModel, requests: Sequence[Any], disable_tqdm: bool,
                       standard: Standard) -> list[str]:
        """lm-eval's answers for ``requests``, in their order.

        Their room in the model's length was checked over every task's prompts before the
        first window (:func:`check_room_for_prompts`, the model's ``check_requests``).
        """
        requests = list(requests)
        problem = model_problem(lm) if self.settings.requested == "fast" else None
        if self.settings.requested == "standard" or problem:
            return self._standard(lm, problem, requests, disable_tqdm, standard)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            key = json.dumps(request.args[1], sort_keys=True, default=str)
            groups.setdefault(key, []).append(index)
        results: list[str] = [""] * len(requests)
        # lm-eval's own bar and its switches (disable_tqdm, other ranks); ``disable`` is passed
        # only to hide it, so that tqdm's TQDM_DISABLE=1 (a default) still turns it off
        hidden = {"disable": True} if disable_tqdm or getattr(lm, "rank", 0) != 0 else {}
        with tqdm(total=len(requests), desc="Running generate_until requests (fast path)",
                  **hidden) as bar:
            for indices in groups.values():
                texts = self._group(lm, [requests[i] for i in indices], disable_tqdm, standard,
                                    bar)
                for index, text in zip(indices, texts, strict=True):
                    results[index] = text
        return results

    def _group(self, lm: GeneratingModel, group: list, disable_tqdm: bool,
               standard: Standard, bar: tqdm) -> list[str]:
        """One set of generation kwargs: fast when greedy (counted on ``bar``), else lm-eval's."""
        gen_kwargs = group[0].args[1]
        kwargs = normalize_gen_kwargs(copy.deepcopy(gen_kwargs), lm.max_gen_toks)
        eos = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
        max_gen_toks = kwargs.pop("max_gen_toks")
        if problem := kwargs_problem(kwargs):
            texts = self._standard(lm, problem, group, disable_tqdm, standard)
            bar.update(len(group))
            return texts
        contexts = [request.args[0] for request in group]
        tokens = self._generate(lm, contexts, max_gen_toks, [u for u in until if u != eos],
                                bar.update)
        think_end = lm.think_end_token if isinstance(lm.think_end_token, str) else None
        texts = []
        for context, new_tokens in zip(contexts, tokens, strict=True):
            text = postprocess_generated_text(generation=lm.tok_decode(new_tokens), stop=until,
                                              think_end_token=think_end)
            lm.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            texts.append(text)
        self.stats.fast_requests += len(group)
        return texts

    def _generate(self, lm: GeneratingModel, contexts: list[str], max_gen_toks: int,
                  stop_strings: list[str], progress: Callable[[int], Any]) -> list[list[int]]:
        """The new tokens of each context (greedy), longest contexts first.

        On a CPU all batches run as one pool (a batch's rows join the previous one's last
        running rows unless the user bounded the batch), each batch's common prefix once; on a
        GPU batch by batch (:meth:`_device_batch`), an out-of-memory halving the batch.
        """
        inputs = encoded_contexts(lm, contexts, lm.max_length - max_gen_toks)
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
        batch = planned_batch_size(lm, len(inputs[order[0]]) + max_gen_toks, len(inputs),
                                   self.settings.batch_size_asked, self.settings.max_batch_size)
        self.stats.batch_sizes.append(batch)
        out: dict[int, list[int]] = {}
        if torch.device(lm.device).type == "cpu":
            chunks = [order[i:i + batch] for i in range(0, len(order), batch)]
            planned = (self.settings.batch_size_asked, self.settings.max_batch_size) == (None, None)
            rows = generate(lm, self.settings.decoders, [[inputs[i] for i in c] for c in chunks],
                            max_gen_toks, stop_strings, share_prefix=True,
                            admit_at=self.settings.admit_at if planned else 0, progress=progress)
            self.stats.eager_batches += len(chunks)
            out.update(zip([i for c in chunks for i in c], rows, strict=True))
            return [out[i] for i in range(len(inputs))]
        start, graphs = 0, self.settings.decoders.graphs()  # the batch before's graph, if it fits
        while start < len(order):
            chunk = order[start:start + batch]
            try:
                rows = self._device_batch(lm, [inputs[i] for i in chunk], max_gen_toks,
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
            progress(len(chunk))
            start += len(chunk)
        return [out[i] for i in range(len(inputs))]

    def _device_batch(self, lm: GeneratingModel, rows: list[list[int]], max_gen_toks: int,
                   stop_strings: list[str], graphs: DecodeGraphs) -> list[list[int]]:
        """One batch's new tokens: CUDA-graph replays where they hold, else eager steps."""
        # why the batch is decoded step by step: None (graphs hold), a reason, "" off CUDA
        decoders = self.settings.decoders
        problem = (("cuda_graphs=false" if not self.settings.cuda_graphs
                    else decoders.graph_problem(lm.model))
                   if torch.device(lm.device).type == "cuda" else "")
        if problem is None:
            result = generate_static(lm, decoders, rows, max_gen_toks, stop_strings, graphs)
            self.stats.graph_compactions += result.compactions
            self.stats.graph_reuses += result.reused
            problem, tokens = result.graph_problem, result.tokens  # failed capture: eager steps
        else:
            tokens = generate(lm, decoders, [rows], max_gen_toks, stop_strings)
        if problem is None:
            self.stats.graph_batches += 1
        else:
            self.stats.eager_batches += 1
            if problem and problem not in self.stats.eager_reasons:
                self.stats.eager_reasons.append(problem)
        return tokens


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


def _padded(lm: GeneratingModel, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` left-padded by the tokenizer, and their mask, on the model's device."""
    batch = lm.tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    return batch["input_ids"].to(lm.device), batch["attention_mask"].to(lm.device)


def _stop(lm: GeneratingModel, stop_strings: list[str]) -> StopStringCriteria | None:
    return stop_criterion(lm.tokenizer, tuple(stop_strings)) if stop_strings else None


def generate(lm: GeneratingModel, decoders: Decoders, batches: list[list[list[int]]],
             max_gen_toks: int, stop_strings: list[str], share_prefix: bool = False,
             admit_at: int = 0, progress: Callable[[int], Any] | None = None) -> list[list[int]]:
    """Greedy new tokens for every row of ``batches`` in one timed eager decode.

    ``share_prefix``, ``admit_at`` and ``progress`` are
    :func:`~lm_eval_ext.generation.greedy.greedy_decode`'s.
    """
    return lm.metering.timed(decoders.eager, lm.model, [_padded(lm, rows) for rows in batches],
                             max_gen_toks, eos_token_ids(lm.model, lm.tokenizer),
                             _stop(lm, stop_strings), share_prefix=share_prefix,
                             admit_at=admit_at, progress=progress)


def generate_static(lm: GeneratingModel, decoders: Decoders, rows: list[list[int]],
                    max_gen_toks: int, stop_strings: list[str], graphs: DecodeGraphs | None = None
                    ) -> StaticDecodeResult:
    """Greedy new tokens for ``rows`` by CUDA-graph replays from a static cache (one decode).

    ``graphs`` keeps the batch's graph for the next batch that fits it (and may hold one).
    """
    return lm.metering.timed(decoders.graphed, lm.model, *_padded(lm, rows), max_gen_toks,
                             eos_token_ids(lm.model, lm.tokenizer), _stop(lm, stop_strings),
                             graphs=graphs)
