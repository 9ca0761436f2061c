"""``lm-eval-ext judge RUN_DIR``: score the generated reasoning of a run with a judge model.

For every generative task of every run under RUN_DIR whose items have BBQ-style fields
(context, question, ans0-2), each rubric's prompt goes to the judge (any lm-eval model; by
default the embedded model through ``hf-metered``, so the judging energy is metered per rubric
and reported apart from the run's inference). Output beside the samples:

* ``judge_<task>_<stamp>.jsonl``: per ``doc_id`` the ``judge_*`` scores the analysis reads
  (``judge_bias_score``, ``judge_bias_present``, ``judge_reasoning_quality``; NaN = no score),
  each rubric's status and one-line reason;
* ``judge_<task>_<stamp>.json``: judge model and args, rubric SHA-256s, counts per status,
  and the judge's metering.

Non-substantive reasoning (empty, a restated option, a bare refusal) is not sent: Bias Score
null and Reasoning Quality 1, status ``non_substantive``.
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.backends.engine_key import DERIVATION_ARGS
from lm_eval_ext.data.store import sha256_of
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import write_text_atomic
from lm_eval_ext.judge.parse import STATUSES, is_non_substantive, parse_reply
from lm_eval_ext.judge.rubrics import BIAS_PRESENT_THRESHOLD, RUBRICS, Rubric

_FIELDS = ("context", "question", "ans0", "ans1", "ans2")


class JudgingDiffers(ConfigError):
    """A finished judging of other settings is where this one would be written."""

    def __init__(self, scores_path: Path, changed: Sequence[str], fix: str) -> None:
        self.scores_path, self.changed = scores_path, list(changed)
        super().__init__(f"{scores_path} holds an earlier judging with other settings "
                         f"({'; '.join(changed)}); {fix}")


@dataclass(frozen=True)
class JudgeTarget:
    """One task of one run to judge."""

    results_path: Path
    task: str

    @property
    def scores_path(self) -> Path:  # noqa: D102
        from lm_eval_ext.analysis.loader import judge_scores_path

        return judge_scores_path(self.results_path, self.task)

    @property
    def samples_path(self) -> Path:  # noqa: D102
        from lm_eval_ext.analysis.loader import samples_path

        return samples_path(self.results_path, self.task)


def find_targets(run_dir: str | Path) -> list[JudgeTarget]:
    """The generative tasks under ``run_dir`` (lm-eval output folders) that can be judged."""
    from lm_eval_ext.analysis.loader import find_results, read_json

    targets = []
    for results_path in find_results([run_dir]):
        results = read_json(results_path)
        for task, config in (results.get("configs") or {}).items():
            if config.get("output_type") == "generate_until":
                targets.append(JudgeTarget(results_path, task))
    if not targets:
        raise ConfigError(f"{run_dir}: no generative task to judge (the judge scores generated "
                          "reasoning; log-likelihood runs have none)")
    return targets


def _item_fields(doc: dict[str, Any], answer: str | None, reasoning: str | None) -> dict[str, str]:
    options = [doc["ans0"], doc["ans1"], doc["ans2"]]
    chosen = f"{answer}. {options['ABC'.index(answer)]}" if answer in ("A", "B", "C") else \
        "(no parsable answer)"
    groups = doc.get("stereotyped_groups") or []
    return {"context": doc["context"].strip(), "question": doc["question"].strip(),
            "options": "\n".join(f"{'ABC'[i]}. {o}" for i, o in enumerate(options)),
            "answer": chosen, "groups": ", ".join(map(str, groups)) or "(not given)",
            "reasoning": (reasoning or "").strip()}


#: judge prompts per batch where neither --batch-size nor the judge's model args give one
DEFAULT_BATCH_SIZE = 8


def given_args(model_args: str) -> dict[str, str]:
    """The judge's ``--judge-model-args`` as key -> text (unchecked; the model checks them)."""
    return {part.partition("=")[0].strip(): part.partition("=")[2]
            for part in model_args.split(",")}


def judge_model_class(model: str, model_args: str, device: str | None = None,
                      batch_size: int | None = None) -> type:
    """The registered lm-eval model class, with its args checked where it can (no load).

    ``device``, ``batch_size``: the judge's ``--device`` and ``--batch-size``, which its model
    args must not set to another value.
    """
    from lm_eval.api.registry import get_model

    from lm_eval_ext.command_preflight import PreflightError, check_model_name
    from lm_eval_ext.plugin.registration import activate

    activate()
    check_model_name(model, "judge: --judge-model")
    model_class = get_model(model)
    given = given_args(model_args)
    derivation = next((key for key in DERIVATION_ARGS if key in given), None)
    if derivation is not None:  # a judge writes its own verdicts: there is no parent to take
        raise ConfigError(f"judge: --judge-model-args {derivation}: a judge takes no answers "
                          f"from a parent run (it writes its own verdicts); leave {derivation} "
                          "out")
    if hasattr(model_class, "check_model_args"):  # ours: args checked before the load
        model_class.check_model_args(model_args)
    else:  # lm-eval's own (hf): its pretrained, as the command line checks it
        from lm_eval_ext.command_preflight import check_stock_pretrained, model_args_of

        try:
            check_stock_pretrained(model, model_args_of([model_args] if model_args else None),
                                   ("--judge-model", "--judge-model-args"))
        except PreflightError as exc:
            raise ConfigError(f"judge: {exc}") from None
    if batch_size is not None and "batch_size" in given \
            and given["batch_size"].strip() != str(batch_size):
        raise ConfigError(f"judge: --judge-model-args batch_size={given['batch_size']} and "
                          f"--batch-size {batch_size} both set the judge's batch size; give it "
                          f"once (--batch-size {batch_size}, or batch_size= in "
                          "--judge-model-args)")
    if device is not None and "device" in given:
        raise ConfigError(f"judge: --judge-model-args device={given['device']} and --device "
                          f"{device} both set the judge's device; give it once (--device "
                          f"{device}, or device= in --judge-model-args)")
    return model_class


def load_judge_model(model: str, model_args: str, batch_size: int | None, device: str | None):
    """Any registered lm-eval model (hf-metered and the task folders registered first)."""
    import torch

    model_class = judge_model_class(model, model_args)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    extra = {"batch_size": batch_size, "device": device}
    return model_class.create_from_arg_string(model_args, extra)


def judge_target(target: JudgeTarget, lm, rubrics: Sequence[Rubric], *, max_gen_toks: int,
                 limit: int | None, judge: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Judge one task's items; write the scores and the summary; return the summary.

    ``progress=False``: the judge model's progress bar hidden, where its ``generate_until``
    takes lm-eval's ``disable_tqdm``.
    """
    from lm_eval.api.instance import Instance

    from lm_eval_ext.analysis.integrity import check_samples
    from lm_eval_ext.analysis.items import extract_items
    from lm_eval_ext.analysis.loader import read_json, read_samples, samples_path
    from lm_eval_ext.generation.generator import NoRoomForPrompts

    results = read_json(target.results_path)
    path = samples_path(target.results_path, target.task)
    samples = read_samples(path)
    check_samples(results, target.task, samples, path)  # judge only a run's own lines
    samples = samples[:limit]
    if not all(field in (samples[0].get("doc") or {}) for field in _FIELDS):
        raise ConfigError(f"{target.task}: items lack {', '.join(_FIELDS)}; the rubrics judge "
                          "reasoning about a scenario with three options (BBQ tasks)")
    items = extract_items(target.task, results["configs"][target.task], samples)
    rows: list[dict[str, Any]] = []
    requests = []
    for sample, (_, item) in zip(samples, items.iterrows(), strict=True):
        doc = sample["doc"]
        answer, reasoning = (v if isinstance(v, str) else None
                             for v in (item["answer"], item["reasoning"]))
        fields = _item_fields(doc, answer, reasoning)
        row: dict[str, Any] = {"doc_id": int(sample["doc_id"])}
        empty = is_non_substantive(reasoning, [doc["ans0"], doc["ans1"], doc["ans2"]], answer)
        for rubric in rubrics:
            if empty:
                score = rubric.non_substantive_score
                row.update({rubric.column: math.nan if score is None else float(score),
                            f"{rubric.name}_status": "non_substantive",
                            f"{rubric.name}_reason": None})
                continue
            requests.append((row, rubric, Instance(
                "generate_until", doc, (rubric.prompt(**fields),
                                        {"until": [], "max_gen_toks": max_gen_toks,
                                         "do_sample": False}),
                0, (f"judge_{rubric.name}", int(sample["doc_id"]), 1))))
        rows.append(row)
    quiet = ({"disable_tqdm": True} if not progress and "disable_tqdm" in
             inspect.signature(lm.generate_until).parameters else {})
    try:
        replies = (lm.generate_until([instance for _, _, instance in requests], **quiet)
                   if requests else [])
    except NoRoomForPrompts as short:  # in the judge's own flags: it has no --gen_kwargs
        raise ConfigError(short.line("--judge-model-args", "--max-gen-toks N")) from None
    for (row, rubric, _), reply in zip(requests, replies, strict=True):
        verdict = parse_reply(reply, rubric)
        row.update({rubric.column: math.nan if verdict.score is None else float(verdict.score),
                    f"{rubric.name}_status": verdict.status,
                    f"{rubric.name}_reason": verdict.reason, f"{rubric.name}_reply": reply})
    bias = RUBRICS["bias_score"]
    if bias in rubrics:
        for row in rows:
            score = row[bias.column]
            row["judge_bias_present"] = (math.nan if math.isnan(score)
                                         else float(score > BIAS_PRESENT_THRESHOLD))
    scores = "".join(json.dumps(row, allow_nan=True) + "\n" for row in rows)
    counts = {r.name: {s: n for s, n in Counter(row[f"{r.name}_status"] for row in rows).items()}
              for r in rubrics}
    for rubric_counts in counts.values():
        for status in STATUSES:
            rubric_counts.setdefault(status, 0)
    info = lm.get_model_info() if hasattr(lm, "get_model_info") else {}
    summary = {
        "task": target.task, "results": target.results_path.name, "n_items": len(rows),
        "samples_sha256": sha256_of(path),  # the judged lines: scores stay with their run
        "judge": judge, "rubric_sha256": {r.name: r.sha256 for r in rubrics},
        "bias_present_threshold": BIAS_PRESENT_THRESHOLD, "max_gen_toks": max_gen_toks,
        "counts": counts, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "metering": info.get("metering"),
        "boundary": "judge generation only (apart from the judged run's inference energy)",
    }
    # the summary first, the scores last, each whole (a temporary file, then a rename): a
    # scores file is there only for a finished judging, which a rerun reuses
    write_text_atomic(target.scores_path.with_suffix(".json"),
                      json.dumps(summary, indent=2, default=str) + "\n")
    write_text_atomic(target.scores_path, scores)
    return summary


def _items_to_judge(target: JudgeTarget, limit: int | None) -> int:
    """How many items judging ``target`` with ``limit`` covers (the run's samples, the first N)."""
    with open(target.samples_path, "rb") as handle:
        lines = sum(1 for line in handle if line.strip())
    return lines if limit is None else min(limit, lines)


def _judging_differences(target: JudgeTarget, judge: dict[str, Any], rubrics: Sequence[Rubric],
                         max_gen_toks: int, limit: int | None) -> list[str]:
    """How ``target``'s finished judging differs from this one (``[]``: it is this one)."""
    summary_path = target.scores_path.with_suffix(".json")
    if not summary_path.is_file():
        return ["no summary beside its scores"]
    from lm_eval_ext.analysis.loader import read_judge_summary

    summary = read_judge_summary(summary_path, target.results_path)
    earlier = {**{f"judge {k}": v for k, v in (summary.get("judge") or {}).items()},
               "max_gen_toks": summary.get("max_gen_toks"),
               "rubrics": sorted(summary.get("rubric_sha256") or {})}
    now = {**{f"judge {k}": v for k, v in judge.items()}, "max_gen_toks": max_gen_toks,
           "rubrics": sorted(r.name for r in rubrics)}
    # a judging of the first 4 items is not one of every item (no --limit)
    earlier["items"], now["items"] = summary.get("n_items"), _items_to_judge(target, limit)
    changed = [f"{key} {earlier.get(key)!r} then, {now.get(key)!r} now"
               for key in now if earlier.get(key) != now.get(key)]
    if not changed and summary.get("rubric_sha256") != {r.name: r.sha256 for r in rubrics}:
        changed.append("the rubrics' text changed since")
    judged = summary.get("samples_sha256")
    if judged is not None and judged != sha256_of(target.samples_path):
        changed.append("the judged samples file is another (its SHA-256 differs)")
    return changed


def judge_run(run_dir: str | Path, *, model: str = "hf-metered", model_args: str = "",
              batch_size: int | None = None, device: str | None = None,
              max_gen_toks: int = 96, limit: int | None = None,
              rubrics: Sequence[str] = tuple(RUBRICS),
              overwrite: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Judge every generative task under ``run_dir``; one summary per task.

    ``batch_size``: judge prompts per batch (None: ``batch_size=`` of ``model_args``, else 8);
    ``progress=False``: no progress bar (a campaign's ``--quiet``).
    """
    unknown = [name for name in rubrics if name not in RUBRICS]
    if unknown:
        raise ConfigError(f"unknown rubrics {unknown}; available: {', '.join(RUBRICS)}")
    judge_model_class(model, model_args, device, batch_size)  # a misspelled model or arg: no work
    if batch_size is None:
        batch_size = None if "batch_size" in given_args(model_args) else DEFAULT_BATCH_SIZE
    targets = find_targets(run_dir)
    with _held(sorted({t.results_path.parent for t in targets})):
        return _judge_targets(targets, model, model_args, batch_size, device, max_gen_toks,
                              limit, rubrics, overwrite, progress)


@contextlib.contextmanager
def _held(folders: Sequence[Path]) -> Iterator[None]:
    """Each run folder for this judge alone.

    A second judge at once could replace its scores with other settings' (run one after the
    other, the second is refused or reuses them).
    """
    held: list[int] = []
    try:
        for folder in folders:
            fd = os.open(folder, os.O_RDONLY)
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(f"{folder}: another judge command is judging this run now; "
                                  "let it finish, then run this one (it reuses that judging, "
                                  "or names the settings that differ)") from None
        yield
    finally:
        for fd in held:
            os.close(fd)  # the lock goes with it


def _judge_targets(targets: Sequence[JudgeTarget], model: str, model_args: str,
                   batch_size: int | None, device: str | None, max_gen_toks: int,
                   limit: int | None, rubrics: Sequence[str],
                   overwrite: bool, progress: bool) -> list[dict[str, Any]]:
    """:func:`judge_run`'s work on its targets, their folders held."""
    judge = {"model": model, "model_args": model_args, "batch_size": batch_size}
    chosen = [RUBRICS[n] for n in rubrics]
    done = {t.scores_path for t in targets if not overwrite and t.scores_path.exists()}
    for target in targets:
        changed = (_judging_differences(target, judge, chosen, max_gen_toks, limit)
                   if target.scores_path in done else [])
        if changed:
            raise JudgingDiffers(target.scores_path, changed, "pass --overwrite to replace it, "
                                 "or judge with the earlier settings to keep it")
    from lm_eval_ext.analysis.loader import read_judge_summary

    todo = [t for t in targets if t.scores_path not in done]  # a rerun redoes only these
    lm = load_judge_model(model, model_args, batch_size, device) if todo else None
    fresh = {t.scores_path: judge_target(t, lm, chosen, max_gen_toks=max_gen_toks, limit=limit,
                                         judge=judge, progress=progress) for t in todo}
    return [fresh.get(t.scores_path) or {**read_judge_summary(
        t.scores_path.with_suffix(".json"), t.results_path), "reused": True} for t in targets]
