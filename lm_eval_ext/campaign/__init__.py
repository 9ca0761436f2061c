"""Campaigns and grids: one resumable command from a protocol matrix to conclusions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm_eval_ext.campaign.spec import CampaignSpec, build_spec, load_spec, parse_shard, shard_cells
from lm_eval_ext.campaign.store import CampaignFolder
from lm_eval_ext.errors import ConfigError

__all__ = ["CampaignOutcome", "CampaignSpec", "build_spec", "campaign_source", "dry_run",
           "load_spec", "run_campaign", "status_lines"]


def campaign_source(spec_path: str | None, *, grid: bool = False, preset: str | None = None,
                    preset_options: dict[str, Any] | None = None) -> tuple[CampaignSpec, str]:
    """(spec, YAML text) from ``CAMPAIGN.yaml``, ``GRID.yaml`` (``grid``) or a ``preset``.

    ``preset_options`` are the preset's own settings (``model_args``, ``tasks``, ``path``,
    ``large_batch``, ``limit``, ``execution``); only ``limit`` and ``execution`` may be given
    without a preset: ``limit`` is refused there (a campaign file sets ``lm_eval: {limit: N}``),
    ``execution`` replaces the file's ``execution:``.
    """
    import yaml

    from lm_eval_ext.errors import LmEvalExtError

    options = {k: v for k, v in (preset_options or {}).items() if v is not None}
    if grid:
        from lm_eval_ext.campaign.grid import grid_campaign
        from lm_eval_ext.campaign.yaml_file import read_yaml

        raw = grid_campaign(read_yaml(spec_path, "grid"))
        return build_spec(raw), yaml.safe_dump(raw, sort_keys=False)
    if preset:
        if spec_path:
            raise LmEvalExtError("give either CAMPAIGN.yaml or --preset, not both")
        from lm_eval_ext.campaign.presets import preset as build_preset

        raw = build_preset(preset, **options)
        return build_spec(raw), yaml.safe_dump(raw, sort_keys=False)
    if not spec_path:
        raise LmEvalExtError("give CAMPAIGN.yaml or --preset paper-stress-test")
    _refuse_preset_options(spec_path, options)
    if options.get("execution"):
        from lm_eval_ext.campaign.yaml_file import read_yaml

        content = read_yaml(spec_path, "campaign")
        given = content.get("execution") if isinstance(content, dict) else None
        if given and given != options["execution"]:
            raise ConfigError(f"{spec_path} sets execution: {given}, and --execution asks for "
                              f"{options['execution']}; give the mode once (edit the file, or "
                              "drop --execution)")
        raw = ({**content, "execution": options["execution"]} if isinstance(content, dict)
               else content)
        try:
            return build_spec(raw), yaml.safe_dump(raw, sort_keys=False)
        except ConfigError as exc:
            raise ConfigError(f"{spec_path}: {exc}") from exc
    return load_spec(spec_path), Path(spec_path).read_text(encoding="utf-8")


#: each preset-only option given with a campaign file, and where the file says it instead
_IN_A_FILE = {"limit": "lm_eval: {limit: N}", "model_args": "models: {label: model_args}",
              "tasks": "tasks: [...]", "path": "its task names (bbq_instrument or "
              "bbq_instrument_loglik)", "large_batch": "each condition's batch_size"}


def _refuse_preset_options(spec_path: str, options: dict[str, Any]) -> None:
    """A ``--preset`` setting given with a campaign file: one line, never ignored."""
    from lm_eval_ext.errors import LmEvalExtError

    for key, where in _IN_A_FILE.items():
        if key in options:
            option = "--large-batch" if key == "large_batch" else f"--{key}"
            raise LmEvalExtError(f"{option} belongs to --preset; in a campaign file set "
                                 f"{where} (edit {spec_path}, or leave {option} out)")


@dataclass(frozen=True)
class CampaignOutcome:
    """What one invocation did: cell ids by outcome, completeness, report paths."""

    done: list[str]
    skipped: list[str]
    failed: list[str]
    busy: list[str]
    complete: bool
    reports: list[Path]
    #: the failed cells that lm-eval-ext refused (exit 2): a setting, not the machine
    refused: list[str] = field(default_factory=list)


def run_campaign(spec: CampaignSpec, out: str | Path, source_yaml: str, *, shard: str = "1/1",
                 analyze: bool = True, analysis_settings: dict[str, Any] | None = None,
                 echo: bool = True, grid: bool = False, analyze_only: bool = False,
                 measure_all: bool = False, judge: Any = None) -> CampaignOutcome:
    """Run this shard's unfinished cells; analyse once every cell of the campaign is done.

    ``grid``: the cells form a grid of models x configurations (``analyze --grid``).
    ``analyze_only``: run no cell; analyse every comparison whose cells are done.
    ``measure_all``: run every cell for real; by default a batch-1 log-likelihood or greedy
    generative cell whose items lie inside a finished cell of the same settings takes its
    answers from it (:mod:`lm_eval_ext.campaign.derivation`).
    ``judge``: :class:`~lm_eval_ext.campaign.judging.JudgeSettings` to judge the generative
    cells before the analysis (None: no judge).
    """
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.campaign.analysis import ComparisonsFailed, run_comparisons, run_grid_analysis
    from lm_eval_ext.campaign.derivation import plan_derivations
    from lm_eval_ext.campaign.energy import summarize_energy
    from lm_eval_ext.campaign.preflight import check_cells, check_judgeable
    from lm_eval_ext.campaign.runner import run_cells
    from lm_eval_ext.campaign.subsets import summarize_subsets
    from lm_eval_ext.campaign.table1 import summarize_table1

    index, count = parse_shard(shard)
    folder = CampaignFolder(out)
    if analyze_only and not folder.identity_path.is_file():
        raise ConfigError(f"--analyze-only: {out} holds no campaign (no campaign.json); run the "
                          "campaign first, or check --out")
    cells = shard_cells(spec.cells, index, count)  # an empty shard is refused: nothing made
    if judge is not None:
        check_judgeable(spec.cells)
    if not analyze_only:
        check_cells(spec.cells, devices=True)
    folder.bind(spec, source_yaml)
    if analyze_only:  # nothing runs: the finished cells count as skipped
        outcome = {"done": [], "failed": [], "busy": [],
                   "skipped": [c.cell_id for c in cells if folder.record(c) is not None]}
    else:
        outcome = run_cells(spec, folder, cells, shard=shard, echo=echo,
                            derive=plan_derivations(spec.cells, measure_all=measure_all))
    manifest = folder.write_manifest(spec)
    reports: list[Path] = []
    if analyze_only or (analyze and manifest["complete"]):
        settings = {"n_resamples": 10_000, "mc_draws": 1_000, "seed": 0, "progress": echo,
                    **(analysis_settings or {})}
        if judge is not None:
            from lm_eval_ext.campaign.judging import judge_cells

            judge_cells(folder, judge, progress=echo)
        records = folder.records(spec)  # read once, for every analysis step
        if grid:
            reports = run_grid_analysis(spec, folder, records, **settings)
        else:
            failed: ComparisonsFailed | None = None
            try:
                reports = run_comparisons(spec, folder, records, **settings)
            except ComparisonsFailed as exc:  # the summaries are written all the same
                failed, reports = exc, exc.reports
            reports += (summarize_subsets(spec, folder, records)
                        + summarize_energy(spec, folder, records)
                        + summarize_table1(spec, folder, records))
            if failed is not None:
                raise AnalysisInputError(
                    f"{len(failed.failed)} comparison(s) could not be analysed (the other "
                    f"outputs are written, under {folder.root / 'analysis'}): "
                    f"{'; '.join(failed.failed)}")
    return CampaignOutcome(outcome["done"], outcome["skipped"], outcome["failed"],
                           outcome["busy"], manifest["complete"], reports,
                           outcome.get("refused", []))


@dataclass(frozen=True)
class DryRun:
    """What a dry run found: the cells to run with their estimates, those done, calibration."""

    estimates: list[Any]  # sizes.CellEstimate, in campaign order
    done: list[str]
    calibration: dict[str, dict[str, Any]]
    argv: dict[str, list[str]]  # each cell's lm_eval arguments (a derived one's parent shown)


def plan_dry_run(spec: CampaignSpec, shard: str = "1/1", calibration_limit: int | None = 8,
                 echo: bool = False, out: str | Path | None = None, measure_all: bool = False,
                 calibration: dict[str, dict[str, Any]] | None = None) -> DryRun:
    """The cells of the shard with their items and estimated device seconds (nothing written).

    With ``out``: the folder must be new, empty or this campaign's (checked); cells it already
    holds are done and left out of the estimate. A cell that will take its answers from an
    earlier one is estimated at its re-check's cost (:mod:`~lm_eval_ext.campaign.sizes`).
    ``calibration``: rates measured before (e.g. for the same engines at another limit),
    else a calibration run of ``calibration_limit`` items per engine configuration.
    """
    from lm_eval_ext.campaign.derivation import plan_derivations
    from lm_eval_ext.campaign.preflight import check_cells
    from lm_eval_ext.campaign.sizes import calibrate, estimate_cells, task_sizes

    index, count = parse_shard(shard)
    check_cells(spec.cells)
    folder = CampaignFolder(out) if out is not None else None
    if folder is not None:
        folder.check(spec)
    cells = shard_cells(spec.cells, index, count)
    done = {c.cell_id for c in cells if folder is not None and folder.record(c) is not None}
    cells = [c for c in cells if c.cell_id not in done]
    if calibration is None:
        calibration = calibrate(cells, calibration_limit, echo=echo) if calibration_limit else {}
    plan = plan_derivations(spec.cells, measure_all=measure_all)
    return DryRun(estimate_cells(cells, task_sizes(cells), calibration, plan), sorted(done),
                  calibration,
                  {c.cell_id: c.lm_eval_argv("<cell>", (p := plan.get(c.cell_id)) and f"<{p}>")
                   for c in cells})


def dry_run(spec: CampaignSpec, shard: str = "1/1", calibration_limit: int | None = 8,
            echo: bool = False, out: str | Path | None = None,
            measure_all: bool = False) -> tuple[list[str], bool]:
    """Lines: each cell of the shard with its items and estimated seconds (:func:`plan_dry_run`).

    And whether every calibration run succeeded (a failed one fails its cells the same way).
    """
    from lm_eval_ext.campaign.confounds import confounded_comparison_lines

    found = plan_dry_run(spec, shard, calibration_limit, echo, out, measure_all)
    lines, total, unknown = [], 0.0, 0
    here = {row.cell_id for row in found.estimates} | set(found.done)
    for row in found.estimates:
        total += row.seconds or 0.0
        unknown += row.seconds is None
        shown = f"{row.seconds:7.0f} s" if row.seconds is not None else "      ? s"
        how = (f" (derived: re-check of {row.run_items} items" + (
            "" if row.parent in here else f", if its parent {row.parent} (another shard's) is "
            "done when it starts; else it runs in full") + ")" if row.parent
            and row.run_items < row.items else "")
        lines.append(f"{row.cell_id:60s} {row.items:6d} items {shown}{how}  lm_eval "
                     + " ".join(found.argv[row.cell_id]))
    lines += [f"{cell_id:60s} done (in {out}; not run again)" for cell_id in found.done]
    for calibrated in found.calibration.values():
        if "error" in calibrated:
            lines.append(f"calibration of {calibrated['cell']} failed: {calibrated['error']}")
    lines.append(f"{len(found.estimates)} cells to run (shard {shard} of {len(spec.cells)}"
                 + (f"; {len(found.done)} already done" if found.done else "")
                 + "); estimated device time "
                 f"{total / 60:.1f} min" + (f" + {unknown} cells not estimated" if unknown else "")
                 + (f" (calibrated on {calibration_limit} items per configuration; derived "
                    "cells at their re-check's cost, the model load once per loaded model)"
                    if calibration_limit else " (no calibration)"))
    failed = any("error" in calibrated for calibrated in found.calibration.values())
    return lines + confounded_comparison_lines(spec), not failed


def status_lines(spec: CampaignSpec, out: str | Path) -> tuple[list[str], bool]:
    """Completeness across all shards: one line per cell that is not done, and a total."""
    folder = CampaignFolder(out)
    if not folder.identity_path.is_file():
        return [f"{out} holds no campaign (no campaign.json)"], False
    folder.bind(spec, "")  # the same campaign? (raises with the differing keys if not)
    manifest = folder.write_manifest(spec)
    notes = {"failed": lambda row: f" (exit {row.get('returncode')}, see "
                                   f"failed/{row['cell_id']}.log)",
             "damaged": lambda row: f" ({row['damage']}; the next run of its shard runs it "
                                    "again)"}
    lines = [f"{row['cell_id']}: {row['status']}"
             + notes.get(row["status"], lambda row: "")(row)
             for row in manifest["cells"] if row["status"] != "done"]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(manifest["counts"].items()))
    lines.append(f"{spec.name}: {len(manifest['cells'])} cells: {counts}"
                 + (" - complete" if manifest["complete"] else ""))
    return lines, manifest["complete"]
