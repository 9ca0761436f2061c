"""Grids: models x configuration axes, run as a campaign, then rank flips (split from
test_campaign.py so that the two long runs can go to different workers)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from helpers import QUICK_ANALYSIS, run_cli

from lm_eval_ext.campaign import build_spec
from lm_eval_ext.campaign.grid import grid_campaign
from lm_eval_ext.errors import ConfigError


def test_grid_expands_axes_and_drops_decoding_on_loglik():
    raw = grid_campaign({"models": {"a": "", "b": "precision=bf16"},
                         "benchmarks": ["bbq_subset_12p5pct"],
                         "template_tier": ["minimal", "detailed"],
                         "scoring_path": ["generative", "loglik"],
                         "decoding": {"greedy": {}, "t07": {"do_sample": True,
                                                            "temperature": 0.7}}})
    spec = build_spec(raw)
    conditions = sorted({c.condition for c in spec.cells})
    assert len(conditions) == 2 * 2 + 2 and len(spec.cells) == 2 * 6
    assert "loglik.minimal.0shot" in conditions and "generative.detailed.0shot.t07" in conditions
    [cell] = [c for c in spec.cells if c.condition == "generative.detailed.0shot.t07"
              and c.model_label == "a"]
    assert cell.options["metadata"] == {"template_tier": "detailed"}
    assert cell.options["gen_kwargs"] == {"do_sample": True, "temperature": 0.7}
    with pytest.raises(ConfigError, match="at least two"):
        grid_campaign({"models": {"a": ""}, "benchmarks": ["bbq"]})
    # a benchmark named with its scoring path got "unknown task ..._loglik_loglik (e.g. the
    # name you wrote)"
    with pytest.raises(ConfigError) as caught:
        grid_campaign({"models": {"a": "", "b": "precision=bf16"},
                       "benchmarks": ["bbq_subset_12p5pct_loglik"]})
    assert str(caught.value) == (
        "grid benchmarks: 'bbq_subset_12p5pct_loglik' names a scoring path; list the generative "
        "name 'bbq_subset_12p5pct' and set scoring_path: [loglik] (the grid adds _loglik itself)")


@pytest.mark.slow
def test_two_by_two_grid_gives_rank_flips_that_match_the_cells(tmp_path, embedded_checkpoint):
    """The real path (campaign cells -> manifest -> analysis): one model in two precisions, so
    its orderings are usually ties here; the counting itself is checked where the truth has
    flips (test_analysis_units: rho_flip 0.5 and a core envelope; test_analysis_statistics:
    rank flips by hand, Kendall tau against scipy)."""
    grid = {"name": "g", "models": {"smollm2.fp32-variant": "idle_seconds=0,precision=fp32",
                                    "smollm2.bf16-variant": "idle_seconds=0,precision=bf16"},
            "benchmarks": ["bbq_subset_12p5pct"], "template_tier": ["minimal", "detailed"],
            "scoring_path": ["loglik"], "lm_eval": {"limit": 2}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    result = run_cli(["lm-eval-ext", "grid", str(path), "--out", str(tmp_path / "g"), "--quiet",
                      *QUICK_ANALYSIS])
    assert result.returncode == 0, result.stdout + result.stderr
    # --quiet: no warning with its source line (numpy's, matplotlib's) reaches the user
    assert "Warning:" not in result.stderr and "warnings.warn" not in result.stderr, \
        result.stderr[-2000:]
    out = tmp_path / "g" / "analysis" / "grid"
    flips = pd.read_csv(out / "rank_flips.csv")
    accuracy = {}
    for row in json.loads((tmp_path / "g" / "manifest.json").read_text())["cells"]:
        accuracy[(row["config"]["model_label"], row["config"]["condition"])] = \
            row["metrics"]["acc,none"]
    diffs = [accuracy[("smollm2.bf16-variant", c)] - accuracy[("smollm2.fp32-variant", c)]
             for c in ("loglik.minimal.0shot", "loglik.detailed.0shot")]
    [row] = flips.to_dict("records")
    assert (row["model_a"], row["model_b"], row["n_cells"]) == (
        "smollm2.bf16-variant", "smollm2.fp32-variant", 2)
    assert (row["n_plus"], row["n_minus"]) == (sum(d > 0 for d in diffs), sum(d < 0 for d in diffs))
    shares = pd.read_csv(out / "variance_shares.csv")
    assert set(shares["term"]) >= {"model", "template_tier"}
    assert "precision identical to model" in shares["note"].iloc[0]


def test_a_decoding_axis_without_the_generative_path_is_refused():
    """trial 16: `decoding: {greedy: {}, hot: {...}}` with `scoring_path: [loglik]` was dropped
    without a word (2 loglik cells planned, rc 0)."""
    raw = {"models": {"a": "", "b": "precision=bf16"}, "benchmarks": ["bbq_subset_12p5pct"],
           "scoring_path": ["loglik"],
           "decoding": {"greedy": {}, "hot": {"do_sample": True, "temperature": 0.7}}}
    with pytest.raises(ConfigError) as caught:
        grid_campaign(raw)
    assert str(caught.value) == (
        "grid decoding (greedy, hot) applies to the generative path, and scoring_path is "
        "['loglik']: add generative to scoring_path, or leave decoding out")
    fixed = grid_campaign({**raw, "scoring_path": ["loglik", "generative"]})
    assert sorted(fixed["conditions"]) == ["generative.default.0shot.greedy",
                                           "generative.default.0shot.hot", "loglik.default.0shot"]


def test_analyze_grid_without_the_paired_runs_says_what_grid_needs(tmp_path, capsys):
    """trial 15 and 16: `analyze --grid CELLS --out X` was told about comparing harnesses."""
    from lm_eval_ext.cli.main import main

    assert main(["analyze", "--grid", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                 str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: analyze --grid needs --reference and --runs too: its paired part "
        "compares --runs with --reference (e.g. two models' runs of one configuration: analyze "
        "--reference a=CELL_A --runs b=CELL_B --grid CELL ... --out DIR; `lm-eval-ext grid` "
        "analyses its own cells)")


def test_a_grid_folders_status_needs_no_grid_file(tmp_path, capsys):
    """Trial 17 (N17_135): `grid --help` says --status reads the copy --out keeps, but grid
    required GRID.yaml (argparse's error)."""
    from lm_eval_ext.campaign.store import CampaignFolder
    from lm_eval_ext.cli import main as cli_main

    raw = grid_campaign({"models": {"a": "", "b": "precision=bf16"},
                         "benchmarks": ["bbq_subset_12p5pct"], "scoring_path": ["loglik"]})
    folder = CampaignFolder(tmp_path / "g")
    folder.bind(build_spec(raw), yaml.safe_dump(raw, sort_keys=False))  # as `grid` binds it
    assert cli_main.main(["grid", "--out", str(folder.root), "--status"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("2 cells: 2 pending")
    assert cli_main.main(["grid", "--out", str(tmp_path / "none"), "--status"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: give GRID.yaml: {tmp_path / 'none'} keeps no campaign.yaml from an "
        "earlier grid run")
