"""A CPU stand-in for vLLM's offline engine, for the tests only (not vLLM).

The GPU engine cannot run on the test machine, so this package takes its place on
``PYTHONPATH``: ``LLM`` loads the same checkpoint with transformers and answers lm-eval's two
kinds of engine call the way vLLM does (greedy generation stopped at the stop strings, which
are left out of the text; prompt log-probs as one ``{token: logprob}`` dict per position, the
first None). Everything around the engine (lm-eval's ``VLLM`` class, the metering, the
switches) is the real code. ``LM_EVAL_EXT_STAND_IN_LOG``: a JSON file that receives the
engine's constructor arguments.
"""

from __future__ import annotations

import json
import os
import types

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SamplingParams:
    """The fields lm-eval sets."""

    def __init__(self, max_tokens: int = 16, stop=None, temperature: float = 0.0,
                 prompt_logprobs: int | None = None, detokenize: bool = True,
                 skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True,
                 **other):
        if temperature not in (0, 0.0, None) or other:
            raise NotImplementedError(f"the stand-in engine is greedy only (got {other})")
        self.max_tokens, self.stop = max_tokens, list(stop or [])
        self.prompt_logprobs, self.skip_special_tokens = prompt_logprobs, skip_special_tokens


def TokensPrompt(prompt_token_ids):  # noqa: N802  (a TypedDict in vLLM)
    return {"prompt_token_ids": list(prompt_token_ids)}


class LLM:
    """The same checkpoint through transformers, one prompt at a time."""

    def __init__(self, model: str, dtype: str = "auto", quantization=None, max_num_seqs=None,
                 tensor_parallel_size: int = 1, **kwargs):
        log = os.environ.get("LM_EVAL_EXT_STAND_IN_LOG")
        if log:
            with open(log, "w") as handle:
                json.dump({"model": model, "dtype": dtype, "quantization": quantization,
                           "max_num_seqs": max_num_seqs,
                           "tensor_parallel_size": tensor_parallel_size}, handle, default=str)
        torch_dtype = DTYPES.get(str(dtype), "auto")
        self.hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        config = types.SimpleNamespace(max_model_len=self.hf.config.max_position_embeddings,
                                       dtype=self.hf.dtype, quantization=quantization)
        scheduler = types.SimpleNamespace(max_num_seqs=max_num_seqs or 256)
        self.llm_engine = types.SimpleNamespace(
            model_config=config, vllm_config=types.SimpleNamespace(scheduler_config=scheduler),
            engine_core=types.SimpleNamespace(shutdown=lambda: None))

    @torch.no_grad()
    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        """One output per prompt, in order; with ``use_tqdm``, vLLM 0.24's speed arithmetic
        (it divides by the bar's elapsed time, which is 0 when tqdm is disabled: vllm#28097)."""
        if use_tqdm:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(prompts))
            len(prompts) / bar.format_dict["elapsed"]
            bar.close()
        if not isinstance(sampling_params, list):
            sampling_params = [sampling_params] * len(prompts)
        return [self._prompt_logprobs(p["prompt_token_ids"]) if sp.prompt_logprobs
                else self._generate(p["prompt_token_ids"], sp)
                for p, sp in zip(prompts, sampling_params, strict=True)]

    def _prompt_logprobs(self, ids: list[int]):
        logits = self.hf(torch.tensor([ids])).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        rows: list = [None]
        for position, token in enumerate(ids[1:]):
            top = int(logprobs[position].argmax())
            rows.append({token: float(logprobs[position, token]),
                         top: float(logprobs[position, top])})
        return types.SimpleNamespace(prompt_logprobs=rows, outputs=[])

    def _generate(self, ids: list[int], params: SamplingParams):
        out = self.hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                               dtype=torch.long), max_new_tokens=params.max_tokens,
                               do_sample=False, pad_token_id=self.tokenizer.pad_token_id)
        new = out[0, len(ids):].tolist()
        if self.tokenizer.eos_token_id in new:
            new = new[:new.index(self.tokenizer.eos_token_id)]
        text = self.tokenizer.decode(new, skip_special_tokens=params.skip_special_tokens)
        cuts = [text.index(stop) for stop in params.stop if stop and stop in text]
        text = text[:min(cuts)] if cuts else text
        return types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text, token_ids=new)])
