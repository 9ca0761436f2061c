"""Greedy decoding with a static KV cache, its decode step replayed as one CUDA graph.

A decode step of a small model on a GPU is launch-bound: each of its few hundred kernels runs
for microseconds, and the host spends longer issuing them than the device spends running
them. Here the KV cache is transformers' ``StaticCache`` (allocated once for the prompt plus
``max_new_tokens``), so every step has the same shapes and addresses; the first step runs
eagerly (it also warms up the kernels), the second is captured as a CUDA graph
(``torch.cuda.graph``), and every later step copies its token into the graph's input and
replays it: one launch per step. Capture costs one step's time, where ``torch.compile``
costs tens of seconds per process (the measurements in issue 22), so it pays off on a single
task.

The step is :func:`~lm_eval_ext.model_wrappers.greedy_decode.greedy_decode`'s: positions from
the left-padded mask, the last position's scores in fp32, their argmax, the same end tokens
and stop strings. The attention mask is built here (4-D, over the whole static cache: the
row's own tokens so far), so the model's mask code runs no host-side check inside the graph.
Rows that finish stay in the batch (the graph has one shape); their later tokens are dropped.
The host looks at the tokens only every :data:`CHECK_EVERY` steps (whether all rows have
ended), so it queues steps while the device runs them; each row's end step is kept on the
device.

Where the cache or the graph cannot hold (:func:`static_decode_problem`: quantized weights,
whose kernels synchronise with the host; sliding-window layers; other attention kernels),
the fast path keeps ``greedy_decode``. With ``cuda_graph=False`` (and on a CPU) the same
static-cache loop runs eagerly: that is what the CPU tests compare with ``generate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lm_eval_ext.model_wrappers.greedy_decode import cache_keyword

#: attention kernels the 4-D mask below is built for (bool for sdpa, additive for eager)
ATTENTION = ("sdpa", "eager")
#: steps between the host's checks whether every row has ended (each check waits for the
#: device; between checks the host queues steps ahead of it)
CHECK_EVERY = 8


@dataclasses.dataclass(frozen=True)
class StaticDecodeResult:
    """The new tokens of each row, and whether later steps were graph replays."""

    tokens: list[list[int]]
    graph_replays: int
    graph_problem: str | None  # why capture failed (the steps then ran eagerly), or None


def static_decode_problem(model: Any) -> str | None:
    """Why this model cannot decode from a static cache in a CUDA graph (None: it can)."""
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return "quantized weights (their kernels synchronise with the host)"
    config = model.config.get_text_config(decoder=True)
    if getattr(config, "sliding_window", None) or "sliding_attention" in (
            getattr(config, "layer_types", None) or ()):
        return "sliding-window attention layers"
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in ATTENTION:
        return f"attention implementation {attention!r}"
    return None


def _captured(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """``step`` recorded once as a CUDA graph; calling the result replays it."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return logits

    return replay


@torch.inference_mode()
def static_greedy_decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         max_new_tokens: int, eos_ids: Sequence[int], stop: Any = None,
                         cuda_graph: bool = True) -> StaticDecodeResult:
    """The new tokens of each (left-padded) row, the stopping token included.

    Args:
        model: A decoder-only transformers model without :func:`static_decode_problem`.
        input_ids: Left-padded prompts, ``[batch, width]``.
        attention_mask: Their mask (0 on padding).
        max_new_tokens: Most new tokens per row.
        eos_ids: Token ids that end a row.
        stop: A ``StopStringCriteria`` (or None): called on the generated tokens, True ends a row.
        cuda_graph: Replay the decode step as a CUDA graph (from the second decode step on).
    """
    from transformers import StaticCache

    device = input_ids.device
    rows, width = input_ids.shape
    cache = StaticCache(config=model.config, max_cache_len=width + max_new_tokens)
    common = {"use_cache": True, cache_keyword(model): cache, "logits_to_keep": 1}
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                   **common).logits[:, -1]
    # the decode step's inputs live in fixed tensors (a graph reads them by address)
    sdpa = model.config._attn_implementation == "sdpa"
    hidden = False if sdpa else torch.finfo(model.dtype).min
    mask = torch.full((rows, 1, 1, width + max_new_tokens), hidden,
                      dtype=torch.bool if sdpa else model.dtype, device=device)
    mask[:, 0, 0, :width].masked_fill_(attention_mask.bool(), not hidden if sdpa else 0.0)
    step_ids = input_ids.new_zeros((rows, 1))
    step_positions = positions[:, -1:].clone()

    def step() -> torch.Tensor:
        return model(input_ids=step_ids, attention_mask=mask, position_ids=step_positions,
                     **common).logits[:, -1]

    run, replays, problem = step, 0, None
    eos = torch.tensor(list(eos_ids), device=device, dtype=torch.long)
    ended = torch.zeros(rows, dtype=torch.bool, device=device)
    last = torch.full((rows,), max_new_tokens - 1, dtype=torch.long, device=device)
    generated = input_ids.new_zeros((rows, max_new_tokens))
    for index in range(max_new_tokens):  # no host synchronisation but every CHECK_EVERY steps
        token = logits.float().argmax(-1)
        generated[:, index] = token
        done = torch.isin(token, eos)
        if stop is not None:
            done |= stop(generated[:, :index + 1], None).to(device)
        last.masked_fill_(done & ~ended, index)
        ended |= done
        if index == max_new_tokens - 1 or (index % CHECK_EVERY == CHECK_EVERY - 1
                                           and bool(ended.all())):
            break
        step_ids.copy_(token[:, None])
        step_positions.add_(1)
        mask[:, 0, 0, width + index] = True if sdpa else 0.0
        if cuda_graph and index == 1 and problem is None:
            try:  # the first step ran eagerly (the warm-up); record the second
                run = _captured(step)
            except RuntimeError as error:  # a host synchronisation inside the model's forward
                problem = f"CUDA graph capture failed: {str(error).splitlines()[0]}"
                run = step
        replays += run is not step
        logits = run()
    out = [row[:end + 1] for row, end in zip(generated.tolist(), last.tolist(), strict=True)]
    return StaticDecodeResult(out, replays, problem)
