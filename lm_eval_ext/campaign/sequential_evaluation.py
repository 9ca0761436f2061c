"""``lm-eval-ext sequential``: evaluate nested BBQ item sets until the claim is settled.

Look ``k`` evaluates only the items of set ``k`` that earlier looks did not (an increment
task registered under ``OUT/tasks``), for the reference and the candidate configuration, each
in its own lm-eval process (hf-metered, so joules are metered per look). After each look the
paired delta of the pre-registered metric over all items so far goes through
:mod:`lm_eval_ext.analysis.stats.group_sequential`. The pre-registration card is written before the first
look; ``sequential.json`` is rewritten after every look, and finished looks are reused on a
rerun (a crash loses at most the look in flight).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.loader import find_results, load_run
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, MetricSpec
from lm_eval_ext.analysis.stats.group_sequential import (
    CONTINUE,
    SequentialPlan,
    decide,
    final_mde,
)
from lm_eval_ext.analysis.stats.linearised import linearised_delta
from lm_eval_ext.campaign.preflight import check_model_args
from lm_eval_ext.campaign.runner import run_lm_eval
from lm_eval_ext.campaign.spec import parse_model_args
from lm_eval_ext.campaign.store import config_differences, read_json_file
from lm_eval_ext.errors import ConfigError, LmEvalExtError
from lm_eval_ext.files import staging_folder, swap_in

#: the frozen instrument's nested memberships, smallest first
NESTED_FAMILY = ("12p5pct", "25pct", "37p5pct", "50pct", "75pct", "instrument")
METRICS = {"accuracy": ACCURACY, "bias_s_dis": BIAS_S_DIS, "bias_s_amb": BIAS_S_AMB}
ROLES = ("reference", "candidate")


@dataclass(frozen=True)
class Arm:
    """One configuration: hf-metered model args and batch size."""

    model_args: str
    batch_size: str = "1"


def _look_keys(look: str) -> list[tuple[str, int]]:
    """(category, example_id) of a membership name or a category,example_id CSV (checked)."""
    if Path(look).suffix == ".csv":
        from lm_eval_ext.data.external_manifest import load_manifest_rows

        return [(r["category"], int(r["example_id"])) for r in load_manifest_rows(look)]
    from lm_eval_ext.data.instrument import load_membership, membership_names

    known = ["full", *membership_names()]
    if look not in known:
        raise ConfigError(f"sequential: --looks: {look!r} is neither a BBQ membership ("
                          f"{', '.join(known)}) nor a category,example_id .csv file")
    return [(r["category"], int(r["example_id"])) for r in load_membership(look).rows]


def _units(keys: Sequence[tuple[str, int]]) -> set[str]:
    from lm_eval_ext.data.bbq import unit_id

    return {unit_id(c, int(i)) for c, i in keys}


def plan_looks(looks: Sequence[str]) -> tuple[list[list[tuple[str, int]]], tuple[float, ...]]:
    """Each look's new items and its information fraction (units so far / units at the end).

    Raises:
        ConfigError: The sets are not nested (each must contain the one before and add items).
    """
    cumulative = [_look_keys(look) for look in looks]
    increments, seen = [], set()
    for name, keys in zip(looks, cumulative, strict=True):
        if not seen <= set(keys):
            raise ConfigError(f"sequential: look {name} does not contain the items of the look "
                              "before; the looks must be nested (smallest first)")
        increments.append([k for k in keys if k not in seen])
        seen |= set(keys)
    units = [len(_units(keys)) for keys in cumulative]
    for name, before, now in zip(looks[1:], units, units[1:], strict=False):
        if now <= before:  # the information fraction must grow at every look
            raise ConfigError(f"sequential: look {name} adds no natural units (BBQ contexts) to "
                              "the look before (e.g. the same set twice); give each look once, "
                              "each with more units than the one before")
    return increments, tuple(u / units[-1] for u in units)


def _register_increment(out: Path, look: int, keys: Sequence[tuple[str, int]]) -> str:
    from lm_eval_ext.tasks.bbq.registered import register_manifest_task

    task = f"bbq_seq_look{look}"
    ids = out / "looks" / str(look) / "new_items.csv"  # the task folder keeps its own copy
    ids.parent.mkdir(parents=True, exist_ok=True)
    with open(ids, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("category", "example_id"))
        writer.writerows(keys)
    register_manifest_task(ids, task, root=out / "tasks")
    return task


def _run_arm(out: Path, look: int, role: str, arm: Arm, task: str, echo: bool) -> Path:
    """One arm of one look, written whole (:mod:`lm_eval_ext.files`: a staging folder, swapped in).

    lm-eval writes into ``.ROLE.new``, which becomes ``ROLE`` only once its results are there;
    a killed step leaves the staging folder, which the next run empties and redoes.
    """
    folder = out / "looks" / str(look) / role
    if folder.is_dir() and any(folder.rglob("results_*.json")):
        return folder  # finished on an earlier run: reused, never re-run
    staging = staging_folder(folder)
    argv = ["--model", "hf-metered", "--model_args", arm.model_args, "--tasks", task,
            "--include_path", str(out / "tasks" / task.removesuffix("_loglik")),
            "--batch_size", arm.batch_size, "--output_path", str(staging), "--log_samples"]
    code = run_lm_eval(argv, folder.parent / f"{role}.log", echo=echo)
    if code != 0 or not any(staging.rglob("results_*.json")):
        raise ConfigError(f"sequential: look {look}, {role} failed (exit {code}); see "
                          f"{folder.parent / f'{role}.log'}")
    swap_in(staging, folder)  # an unfinished folder of an older version is replaced whole
    return folder


def _look_run(folder: Path) -> tuple[pd.DataFrame, float | None]:
    """One arm's items and joules of one look (None: not measured).

    A finished look is reused by the next run, so a damaged one is named with the way out:
    remove it, and the rerun redoes that look alone.
    """
    try:
        run = load_run(find_results([folder])[0])
    except LmEvalExtError as exc:
        raise ConfigError(f"sequential: {folder} is a finished look that cannot be read back, "
                          f"and a rerun would reuse it: remove {folder} and rerun the same "
                          f"command (it redoes that look alone). The reader said: {exc}"
                          ) from None
    energy = run.info.get("energy_joules")
    return run.items, None if energy is None or energy != energy else float(energy)


def _so_far(looks: Sequence[tuple[pd.DataFrame, float | None]]
            ) -> tuple[pd.DataFrame, float | None]:
    """Items and joules of every look so far (joules None when any look has none)."""
    joules = [j for _, j in looks]
    return (pd.concat([items for items, _ in looks], ignore_index=True),
            None if any(j is None for j in joules) else sum(joules))


def preregistration(plan: SequentialPlan, looks: Sequence[str], arms: dict[str, Arm],
                    path: str) -> dict[str, Any]:
    """The card written before the first look."""
    return {"metric": plan.metric, "margin": plan.margin, "alpha": plan.alpha,
            "beta": plan.beta, "spending": plan.spending, "looks": list(looks),
            "information_fractions": list(plan.fractions), "alpha_per_look": plan.look_alphas(),
            "z_boundary_per_look": plan.boundaries(),
            "scoring_path": path, "arms": {r: asdict(a) for r, a in arms.items()},
            "decisions": "changed: |delta| / se reaches the look's exact group-sequential "
                         "boundary z_k (it spends alpha_k); equivalent: the 1 - 2 alpha_k "
                         "interval lies inside +-margin; else the next look; unresolved after "
                         "the last"}


def _same_answers(reference: Arm, candidate: Arm, path: str) -> list[str] | None:
    """The model args two arms differ in, when none of them changes an answer; else None.

    Such args change only how a run is measured, write out a default, or act on generations on
    the ``loglik`` path (:func:`~lm_eval_ext.backends.engine_key.answer_args`). ``[]``: one
    configuration (model args compared as key=value sets, and the batch).
    """
    from lm_eval_ext.backends.engine_key import answer_args

    ref, cand = (parse_model_args(arm.model_args, "sequential") for arm in (reference, candidate))
    differing = sorted(k for k in set(ref) | set(cand) if ref.get(k) != cand.get(k))
    if reference.batch_size != candidate.batch_size or (
            answer_args(ref, path) != answer_args(cand, path)):
        return None
    return differing


def run_sequential(out: str | Path, reference: Arm, candidate: Arm, *, metric: str = "accuracy",
                   margin_pp: float = 2.0, alpha: float = 0.05, beta: float = 0.2,
                   looks: Sequence[str] = NESTED_FAMILY, path: str = "loglik",
                   echo: bool = True) -> dict[str, Any]:
    """Run looks until the claim is settled; returns (and writes) ``sequential.json``."""
    if metric not in METRICS:
        raise ConfigError(f"sequential: --metric {metric!r}; choose one of {', '.join(METRICS)}")
    if path not in ("loglik", "generative"):
        raise ConfigError("sequential: --path must be loglik or generative")
    out = Path(out)
    increments, fractions = plan_looks(looks)
    plan = SequentialPlan(metric, margin_pp / 100, fractions, alpha, beta)
    for role, arm in (("reference", reference), ("candidate", candidate)):
        check_model_args(arm.model_args, arm.batch_size, f"sequential: --{role}-args",
                         f"sequential: --{role}-batch")
    differing = _same_answers(reference, candidate, path)
    if differing is not None:
        kind = (f"differ only in {', '.join(differing)}, which change no answer here (how a "
                "run is measured, a default written out, or generation settings on the "
                "log-likelihood path)" if differing else
                f"are one configuration (model args {reference.model_args or 'none'!r}, batch "
                f"{reference.batch_size})")
        raise ConfigError(
            f"sequential: the reference and the candidate {kind}, so every look would compare "
            "the same answers; give the candidate the change to test (e.g. --candidate-batch "
            "8, or --candidate-args with another precision)")
    card_path = out / "preregistration.json"
    if out.is_dir() and any(out.iterdir()) and not card_path.is_file():
        raise ConfigError(f"sequential: --out {out} holds other files and no sequential "
                          "evaluation; use a new or empty --out folder")
    out.mkdir(parents=True, exist_ok=True)  # only once everything above is valid
    spec: MetricSpec = METRICS[metric]
    arms = {"reference": reference, "candidate": candidate}
    card = preregistration(plan, looks, arms, path)
    stored = read_json_file(card_path) if card_path.exists() else card
    if stored != card:
        lines = config_differences(stored, card) if isinstance(stored, dict) else []
        shown = "; ".join(lines[:5]) + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "")
        raise ConfigError(f"{card_path} holds another pre-registration"
                          + (f" ({shown})" if shown else "")
                          + "; use a new --out (a look file's changed content counts too)")
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    results: list[dict[str, Any]] = []
    done: dict[str, list[tuple[pd.DataFrame, float | None]]] = {r: [] for r in ROLES}
    n_total = sum(len(i) for i in increments)
    outcome: dict[str, Any] = {"preregistration": card, "looks": results}
    for k, keys in enumerate(increments):
        task = _register_increment(out, k, keys) + ("_loglik" if path == "loglik" else "")
        for role in ROLES:
            done[role].append(_look_run(_run_arm(out, k, role, arms[role], task, echo)))
        (ref, ref_j), (cand, cand_j) = (_so_far(done[r]) for r in ROLES)
        keys_seen = ref["item_key"]
        if keys_seen.duplicated().any() or set(keys_seen) != set(cand["item_key"]):
            raise ConfigError("sequential: an item was evaluated twice or by one arm only")
        cand = cand.set_index("item_key").loc[keys_seen].reset_index()
        delta, se = linearised_delta(spec, ref, cand, ref["unit_id"])
        look = decide(plan, k, len(ref), ref["unit_id"].nunique(), delta, se)
        joules = None if ref_j is None or cand_j is None else ref_j + cand_j
        results.append({**asdict(look), "membership": looks[k], "new_items": len(keys),
                        "joules_spent": joules})
        outcome.update({"decision": look.decision, "stopped_at_look": k,
                        "items_evaluated": len(ref), "items_in_family": n_total,
                        "joules_spent": joules,
                        "joules_saved_estimate": None if joules is None else
                        joules / len(ref) * (n_total - len(ref)),
                        **full_family_mde(plan, se, len(ref), n_total)})
        (out / "sequential.json").write_text(json.dumps(outcome, indent=2, default=str) + "\n")
        if look.decision != CONTINUE:
            break
    return outcome


def full_family_mde(plan: SequentialPlan, se: float, n_seen: int, n_total: int
                    ) -> dict[str, float | str | None]:
    """``mde_at_full_family`` from a look's standard error, scaled to the whole family.

    None, with ``mde_note`` saying why, where the SE gives no MDE: undefined (too few units),
    or 0 (the arms agree on every item so far: an MDE of 0 pp would claim every effect
    detectable).
    """
    if not se == se:  # NaN
        return {"mde_at_full_family": None,
                "mde_note": "no standard error yet (fewer than 2 natural units)"}
    if se <= 0:
        return {"mde_at_full_family": None,
                "mde_note": ("the standard error is 0: the arms agree on every item so far, so "
                             "the looks give no MDE (0 pp would claim every effect "
                             "detectable)")}
    return {"mde_at_full_family": final_mde(plan, se * (n_seen / n_total) ** 0.5),
            "mde_note": None}
