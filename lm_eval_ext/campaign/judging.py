"""After the cells: the judge over every generative cell, before the analysis.

``lm-eval-ext campaign --judge`` (the default of ``--preset paper-stress-test --path
generative``) runs :func:`~lm_eval_ext.judge.run.judge_run` over the campaign's finished cells:
one judge model load, every generative task of every cell, scores written beside each cell's
samples (``judge_<task>_<stamp>.jsonl``), where ``analyze`` and the Table 1 summary read them.
A rerun judges only the cells not judged yet. ``limit``: the first N items of each cell (a
stated sample; Table 1 gives each mean with its items and a clustered 95% interval).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from lm_eval_ext.campaign.store import CampaignFolder


@dataclass(frozen=True)
class JudgeSettings:
    """The judge of a campaign: any lm-eval model (default the embedded one), its sample."""

    model: str = "hf-metered"
    model_args: str = ""
    limit: int | None = None
    batch_size: int | None = None  # batch_size= of model_args, else 8
    device: str | None = None


def judge_cells(folder: CampaignFolder, settings: JudgeSettings,
                progress: bool = True) -> list[dict[str, Any]]:
    """Judge every finished cell's generative tasks not judged yet; one summary per task.

    ``progress=False`` (``--quiet``): no progress bar.
    """
    from lm_eval_ext.judge.run import JudgingDiffers, judge_run

    if not folder.cells_dir.is_dir():
        return []
    try:
        return judge_run(folder.cells_dir, model=settings.model, model_args=settings.model_args,
                         batch_size=settings.batch_size, device=settings.device,
                         limit=settings.limit, progress=progress)
    except JudgingDiffers as exc:  # campaign has no --overwrite: the judge command has
        raise JudgingDiffers(exc.scores_path, exc.changed, (
            "rerun the campaign with its earlier --judge-model, --judge-model-args and "
            "--judge-limit to keep it, or first judge every cell again with these settings: "
            f"{shlex.join(judge_command(folder, settings))}")) from None


def judge_command(folder: CampaignFolder, settings: JudgeSettings) -> list[str]:
    """The ``lm-eval-ext judge`` command that judges every cell again with ``settings``."""
    command = ["lm-eval-ext", "judge", str(folder.cells_dir), "--overwrite"]
    for option, value, default in (("--judge-model", settings.model, "hf-metered"),
                                   ("--judge-model-args", settings.model_args, ""),
                                   ("--batch-size", settings.batch_size, None),
                                   ("--device", settings.device, None),
                                   ("--limit", settings.limit, None)):
        if value != default:
            command += [option, str(value)]
    return command
