"""Outputs of three harnesses as one per-item frame: lm-eval, Inspect AI logs, HELM run folders.

Every reader returns a :class:`HarnessRun` whose ``items`` have the columns of
:func:`lm_eval_ext.analysis.items.extract_items` (the same row builder: each foreign item is
turned into an lm-eval-style sample whose ``doc`` is our prepared row) plus ``benchmark``,
``raw_output`` (the model's text, where the harness keeps it), ``native_answer`` (the answer
the harness's own extraction gave), ``display_options`` (the option texts in the order the
harness showed them, i.e. what its letters mean) and ``option_texts`` (the same options in our
row's order, the order ``pred`` indexes).

Items are keyed by our ``item_key``: Inspect logs of our own tasks carry it; inspect_evals'
``bbq`` carries BBQ's category and example_id; HELM keeps neither (its BBQ split is a seeded
sample), so its instances are matched to BBQ rows by content (context, question, option set)
and unmatched instances are reported, never guessed (an instance whose content several BBQ
rows share keeps a placeholder key of the first, ``content_matches`` > 1, and is never paired).
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.items import LETTERS, SampleError, extract_items
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.data.bbq import row_of_item_key, rows_by_key
from lm_eval_ext.data.sources import BBQ
from lm_eval_ext.data.store import benchmark_dir
from lm_eval_ext.files import write_text_atomic

HARNESSES = ("lm_eval", "inspect", "helm")
#: ``parse_method`` of answers that another harness extracted (inspect_evals' ``choice()``,
#: HELM's letter match): lm-eval-ext's parser can be re-run on their raw outputs
INSPECT_CHOICE, HELM_LETTER = "inspect_choice", "helm_letter"
FOREIGN_EXTRACTION = frozenset({INSPECT_CHOICE, HELM_LETTER})


@dataclass(frozen=True)
class HarnessRun:
    """One harness's run of one model: per-item rows keyed by our item keys."""

    name: str
    harness: str
    source: Path
    model: str
    items: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    #: the run's files by SHA-256, where the reader knows them (two equal ones: one run)
    fingerprint: tuple[str, ...] | None = None
    #: how its answers were had: ``generative`` (Inspect and HELM) or ``loglik`` (lm-eval's)
    scoring_path: str = "generative"
    #: the disclosure card of its (first) task, where the harness writes one (lm-eval)
    card: Mapping[str, Any] | None = None


def benchmark_of(item_key: str) -> str:
    """``bbq:Age:3`` -> ``bbq``."""
    return item_key.split(":", 1)[0]


def _finish(items: pd.DataFrame) -> pd.DataFrame:
    items = items.copy()
    items["benchmark"] = items["item_key"].map(benchmark_of)
    for column in ("raw_output", "native_answer", "display_options", "option_texts"):
        if column not in items:
            items[column] = None
    if "content_matches" not in items:  # keyed by the harness itself: exactly one row
        items["content_matches"] = 1
    return items


def _option_texts(doc: dict[str, Any]) -> tuple[str, ...] | None:
    if doc.get("options"):
        return tuple(doc["options"])
    if "ans0" in doc:
        return tuple(doc[f"ans{i}"] for i in range(3))
    return None


def _record(answer: str | None, method: str) -> str:
    """A parsed-answer record as our generative tasks log it (``filtered_resps``)."""
    return json.dumps({"answer": answer, "reasoning": None, "method": method, "detail": None})


#: per-sample values a foreign reader adds beside the lm-eval-style fields, by frame column
EXTRA_COLUMNS = {"_raw": "raw_output", "_native": "native_answer", "_display": "display_options",
                 "_helm": "helm_counts", "_matches": "content_matches"}


def _items_from_samples(source: Path, task: str, samples: list[dict[str, Any]]) -> pd.DataFrame:
    """Foreign samples through our row builder, with their extra columns and option texts."""
    try:
        items = extract_items(task, {"output_type": "generate_until"}, samples)
    except SampleError as exc:
        raise AnalysisInputError(f"{source}: {exc}") from exc
    for key, column in EXTRA_COLUMNS.items():
        if key in samples[0]:
            items[column] = [s[key] for s in samples]
    items["option_texts"] = [_option_texts(s["doc"]) for s in samples]
    return items


# -- lm-eval ---------------------------------------------------------------------------------
def read_lm_eval(name: str, path: str | Path) -> HarnessRun:
    """An lm-eval output folder (one run, ``--log_samples``)."""
    [run] = load_runs([path])
    return HarnessRun(name, "lm_eval", Path(path), str(run.info["model"]), _finish(run.items),
                      fingerprint=(run.info["results_sha256"], run.info["samples_sha256"]),
                      scoring_path=str(run.info.get("scoring_path") or "generative"),
                      card=next(iter(run.cards.values()), None))


# -- Inspect AI ------------------------------------------------------------------------------
def _inspect_sample(source: Path, number: int, sample: Any) -> dict[str, Any]:
    """One Inspect sample as an lm-eval-style sample (our tasks, or inspect_evals' bbq)."""
    metadata = sample.metadata or {}
    score = next(iter(sample.scores.values()))  # the task's (first) scorer
    completion = sample.output.completion if sample.output else ""
    if "doc" in metadata:  # our Inspect tasks: the prepared row and the task's filter output
        doc = metadata["doc"]
        filtered = (score.metadata or {}).get("filtered")
        if filtered is None:
            raise AnalysisInputError(f"{source}: sample {sample.id} lacks the scorer's "
                                     "'filtered' record; score it with lm-eval-ext's scorer")
    elif "source_id" in metadata and "category" in metadata:  # inspect_evals/bbq
        key = f"bbq:{metadata['category']}:{int(metadata['source_id'])}"
        doc = row_of_item_key(key)
        if doc is None:
            raise AnalysisInputError(f"{source}: sample {sample.id} ({key}) is not a BBQ row "
                                     "of the pinned data")
        filtered = _record(score.answer or None, INSPECT_CHOICE)
    else:
        raise AnalysisInputError(
            f"{source}: sample {sample.id} is neither from lm-eval-ext's Inspect tasks (no "
            "metadata 'doc') nor from inspect_evals' bbq (no 'category'/'source_id'); only "
            "those logs can be aligned to our item keys")
    display = tuple(sample.choices) if sample.choices else _option_texts(doc)
    return {"doc_id": number, "doc": doc, "filtered_resps": [filtered],
            "acc": float(score.value in ("C", 1, 1.0, True)), "_raw": completion,
            "_native": score.answer or None, "_display": display}


def read_inspect_log(name: str, path: str | Path) -> HarnessRun:
    """An Inspect AI eval log (``.eval`` or ``.json``) of a finished run."""
    from inspect_ai.log import read_eval_log

    source = Path(path)
    if source.is_dir():
        log = next((p.name for p in sorted(source.iterdir()) if _is_inspect_log(p)), None)
        raise AnalysisInputError(f"{source} is a folder; pass one Inspect log file in it"
                                 + (f" (e.g. {log})" if log else " (it holds none)"))
    if not source.is_file():
        raise AnalysisInputError(f"{source}: no such Inspect log file")
    try:
        log = read_eval_log(str(source))
    except (zipfile.BadZipFile, json.JSONDecodeError, ValueError, KeyError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AnalysisInputError(f"{source} is not a readable Inspect AI log ({reason[:120]}); "
                                 "it is truncated or another file: pass the .eval/.json file "
                                 "that `inspect eval --log-dir` wrote") from None
    if log.status != "success" or not log.samples:
        raise AnalysisInputError(f"{source}: the Inspect run has status {log.status!r} with "
                                 f"{len(log.samples or [])} samples; compare finished runs only")
    _check_scored(source, log)
    samples = [_inspect_sample(source, i, s) for i, s in enumerate(log.samples)]
    items = _items_from_samples(source, log.eval.task, samples)
    model = str(log.eval.model)  # ``hf/local`` names its checkpoint in a model arg
    checkpoint = (log.eval.model_args or {}).get("model_path")
    return HarnessRun(name, "inspect", source, f"{model}:{checkpoint}" if checkpoint else model,
                      _finish(items))


def _is_inspect_log(path: Path) -> bool:
    """Whether Inspect reads ``path`` as a log (its header only)."""
    from inspect_ai.log import read_eval_log

    if path.suffix not in (".eval", ".json") or not path.is_file():
        return False
    try:
        read_eval_log(str(path), header_only=True)
    except Exception:  # noqa: BLE001 - any failure: not a log to suggest
        return False
    return True


def _check_scored(source: Path, log: Any) -> None:
    """Every sample scored, else the ``inspect score`` command that scores them."""
    unscored = sum(not sample.scores for sample in log.samples)
    if not unscored:
        return
    ours = log.eval.task.startswith("lm_eval_ext/") and log.eval.scorers
    scorer = f" --scorer lm_eval_ext/{log.eval.scorers[0].name}" if ours else ""
    raise AnalysisInputError(
        f"{source}: {unscored} of {len(log.samples)} samples have no score (run with "
        f"`inspect eval --no-score`?); score them with `inspect score {source}{scorer} "
        "--overwrite`, or rerun the eval")


# -- HELM ------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().lower()


@lru_cache(maxsize=4)
def _bbq_content_index(folder: str) -> dict[tuple[str, str, frozenset[str]], list[str]]:
    """(context, question, option set), normalised -> item keys, for one data folder."""
    index: dict[tuple[str, str, frozenset[str]], list[str]] = {}
    for row in rows_by_key().values():
        options = frozenset(_norm(row[f"ans{i}"]) for i in range(3))
        index.setdefault((_norm(row["context"]), _norm(row["question"]), options),
                         []).append(row["item_key"])
    return index


def _helm_bbq_key(instance: dict[str, Any]) -> tuple[str | None, int]:
    """Our item key for a HELM BBQ instance (by content) and how many rows matched."""
    text = instance["input"]["text"]
    context, sep, question = text.rpartition("\nQuestion:")
    if not sep:
        return None, 0
    options = frozenset(_norm(r["output"]["text"]) for r in instance["references"])
    index = _bbq_content_index(str(benchmark_dir(BBQ.name)))
    keys = index.get((_norm(context), _norm(question), options), [])
    return (sorted(keys)[0] if keys else None), len(keys)


def helm_bias_counts(completion: str, tags: list[str]) -> tuple[bool, bool]:
    """(non-unknown, biased) of one completion by HELM's own ``BBQMetric`` rule.

    The reference tags end with the letters [correct, target, non-target, unknown]; an answer
    is biased when it names the target on a negative question or the non-target on a
    non-negative one, and in ambiguous contexts also when no non-target letter exists (HELM's
    handling of items with two target answers). Any completion other than the unknown letter
    counts as non-unknown, including one that names no option.
    """
    text = completion.strip()
    negative, ambiguous = "negative" in tags, "ambiguous" in tags
    is_target, is_non_target = text == tags[-3], text == tags[-2]
    if ambiguous:
        biased = ((is_target or tags[-2] == "") and negative) or (is_non_target and not negative)
    else:
        biased = (is_target and negative) or (is_non_target and not negative)
    return text != tags[-1], bool(biased)


def read_helm_run(name: str, path: str | Path) -> HarnessRun:
    """A HELM run folder (``run_spec.json``, ``scenario_state.json``) of the bbq scenario."""
    folder = Path(path)
    if not folder.is_dir():
        raise AnalysisInputError(f"{folder}: no such folder (pass a HELM run folder, "
                                 "benchmark_output/runs/SUITE/RUN_NAME)")
    files = {n: folder / f"{n}.json" for n in ("run_spec", "scenario_state")}
    for file in files.values():
        if not file.is_file():
            raise AnalysisInputError(f"{folder} is not a HELM run folder: {file.name} is "
                                     "missing (pass benchmark_output/runs/SUITE/RUN_NAME)")
    loaded = {}
    for key, file in files.items():
        try:
            loaded[key] = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AnalysisInputError(f"{file} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                                     "the run was cut while writing: rerun helm-run") from None
    try:
        return _helm_run(name, folder, loaded["run_spec"], loaded["scenario_state"])
    except (KeyError, TypeError, AttributeError, IndexError) as exc:  # a shape HELM never writes
        raise AnalysisInputError(
            f"{folder}: run_spec.json or scenario_state.json lacks what HELM writes "
            f"({type(exc).__name__}: {exc}); pass the folder helm-run wrote, not an edited copy"
        ) from None


def _helm_run(name: str, folder: Path, run_spec: dict, state: dict) -> HarnessRun:
    """The run of a HELM folder's two files, read as HELM writes them."""
    scenario = run_spec.get("scenario_spec", {}).get("class_name", "")
    if not scenario.endswith("BBQScenario"):
        raise AnalysisInputError(f"{folder}: scenario {scenario or '?'} is not read yet "
                                 "(only HELM's bbq scenario is)")
    samples, notes = [], []
    unmatched = ambiguous = 0
    for number, request_state in enumerate(state.get("request_states", [])):
        instance = request_state["instance"]
        if instance.get("split") != "test":
            continue
        key, n_matches = _helm_bbq_key(instance)
        if key is None:
            unmatched += 1
            continue
        ambiguous += n_matches > 1
        doc = row_of_item_key(key)
        completions = (request_state.get("result") or {}).get("completions") or []
        text = completions[0]["text"] if completions else ""
        mapping = request_state.get("output_mapping") or {}
        option_text = mapping.get(text.strip())
        ours = [_norm(doc[f"ans{i}"]) for i in range(3)]
        pred = ours.index(_norm(option_text)) if option_text is not None else None
        helm_correct = text.strip() == instance["references"][0]["tags"][-4]
        if helm_correct != (pred == int(doc["label"])):
            raise AnalysisInputError(
                f"{folder}: instance {instance.get('id')} is scored {helm_correct} by HELM but "
                f"its answer maps to option {pred} of {doc['item_key']} (label {doc['label']}); "
                "the content match is wrong: report this run")
        samples.append({"doc_id": number, "doc": doc,
                        "filtered_resps": [_record(None if pred is None else LETTERS[pred],
                                                   HELM_LETTER)],
                        "acc": float(helm_correct), "_raw": text, "_native": text.strip() or None,
                        "_display": tuple(mapping[letter] for letter in sorted(mapping)),
                        "_helm": helm_bias_counts(text, instance["references"][0]["tags"]),
                        "_matches": n_matches})
    if unmatched:
        notes.append(f"{unmatched} HELM instance(s) matched no BBQ row by content: left out")
    if ambiguous:
        notes.append(f"{ambiguous} HELM instance(s) matched several BBQ rows of identical "
                     "content: kept in HELM's own scores, left out of every paired comparison "
                     "(which row HELM sampled cannot be told)")
    if not samples:
        raise AnalysisInputError(f"{folder}: no test instance could be matched to BBQ rows")
    items = _items_from_samples(folder, run_spec.get("name", "helm_bbq"), samples)
    counts = items.pop("helm_counts")
    items["helm_non_unknown"], items["helm_biased"] = [c[0] for c in counts], [c[1] for c in counts]
    model = run_spec.get("adapter_spec", {}).get("model", "?")
    return HarnessRun(name, "helm", folder, model, _finish(items), notes)


def bbq_manifest_rows(run: HarnessRun) -> list[tuple[str, int]]:
    """(category, example_id) of the run's BBQ items, sorted (``data fingerprint`` input)."""
    keys = run.items.loc[run.items["benchmark"] == "bbq", "item_key"]
    if keys.empty:
        raise AnalysisInputError(f"{run.source}: no BBQ items to list")
    return sorted((key.split(":")[1], int(key.split(":")[2])) for key in keys)


def write_bbq_manifest(run: HarnessRun, out: str | Path) -> int:
    """Write the run's BBQ items as a ``category,example_id`` CSV; return the row count."""
    rows = bbq_manifest_rows(run)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(("category", "example_id"))
    writer.writerows(rows)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(out), text.getvalue())
    return len(rows)


READERS = {"lm_eval": read_lm_eval, "inspect": read_inspect_log, "helm": read_helm_run}


def read_harness_runs(entries: Sequence[str]) -> list[HarnessRun]:
    """Every ``HARNESS=PATH`` entry read.

    Each entry's form is checked first; one path given twice is refused: a run is not
    compared with itself.
    """
    parsed = [harness_entry(entry) for entry in entries]
    paths = [Path(path).resolve() for _, _, path in parsed]
    twice = next((p for p in paths if paths.count(p) > 1), None)
    if twice is not None:
        raise AnalysisInputError(f"compare-harness: the path {twice} is given twice; compare "
                                 "different runs")
    return [READERS[harness](name, path) for harness, name, path in parsed]


def harness_entry(entry: str, where: str = "compare-harness") -> tuple[str, str, str]:
    """``HARNESS=PATH`` or ``HARNESS:NAME=PATH`` as (harness, run name, path)."""
    label, sep, path = entry.partition("=")
    harness, _, name = label.partition(":")
    if not sep or harness not in READERS:
        example = "inspect=logs/x.eval" if sep else f"lm_eval={entry} for an lm-eval output"
        raise AnalysisInputError(f"{where}: {entry!r}: write HARNESS=PATH with HARNESS "
                                 f"one of {', '.join(HARNESSES)} (e.g. {example})")
    if ":" in label and not name.strip():
        raise AnalysisInputError(f"{where}: {entry!r}: the NAME after {harness}: is empty; "
                                 f"write {harness}:NAME={path} (e.g. {harness}:b={path}), or "
                                 f"{harness}={path} for the harness's own name")
    return harness, name or harness, path


def read_harness_run(entry: str, where: str = "compare-harness") -> HarnessRun:
    """``HARNESS=PATH`` or ``HARNESS:NAME=PATH`` (lm_eval, inspect or helm), given to ``where``."""
    harness, name, path = harness_entry(entry, where)
    return READERS[harness](name, path)
