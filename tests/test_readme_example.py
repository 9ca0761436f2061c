"""The README's worked example runs as printed and prints what it shows.

The commands are read from the README (its first ``bash`` block after the heading), run in a
fresh folder beside a ``shared/data`` link (the README's ``LM_EVAL_EXT_DATA=../shared/data``,
as the repository sits in the set-up), and the lines the README shows must be the last lines
printed.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from helpers import BIN, DATA, REPO

HEADING = "## Did the conclusion change? A worked example"


def worked_example() -> tuple[str, list[str]]:
    """The README's commands (one bash script) and the output lines it shows."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split(HEADING, 1)[1]
    commands = re.search(r"```bash\n(.*?)```", section, re.S)
    shown = re.search(r"```\n(.*?)```", section[commands.end():], re.S)
    return commands.group(1), shown.group(1).strip().splitlines()


def test_the_example_sets_its_data_and_shows_its_caution():
    commands, shown = worked_example()
    assert commands.startswith("export LM_EVAL_EXT_DATA=")
    runs = [line for line in commands.replace("\\\n", " ").splitlines() if " run " in line]
    assert len(runs) == 2 and all("--limit 12" in line for line in runs)
    assert any("caution" in line for line in shown)  # 12 items are 3 natural units


@pytest.mark.slow
def test_the_worked_example_runs_as_printed(tmp_path, embedded_checkpoint):
    commands, shown = worked_example()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(DATA)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LM_EVAL_EXT_DATA"}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "-e", "-c", commands], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-len(shown):] == shown


def test_model_prepare_names_the_model_it_converts(embedded_checkpoint, capsys):
    """The set-up's `lm-eval-ext model prepare` printed a bare folder."""
    from lm_eval_ext.cli import main as cli_main

    assert cli_main.main(["model", "prepare"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["SmolLM2-135M-Instruct (the embedded model, used when --model_args has no "
                     "pretrained=):", str(embedded_checkpoint)]
