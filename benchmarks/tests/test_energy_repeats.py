"""benchmarks/energy_repeats.py's statistics and plan, and stress_test.py's inference count."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from energy_repeats import _pooled_cv, calibration, measured_only  # noqa: E402
from stress_test import measured_inference_seconds  # noqa: E402


def test_calibration_is_pairwise_z_and_the_sd_over_the_rms_se():
    # repeats 100 (SE 2), 103 (SE 2), 110 (SE 4): pairs z = -1.06, -2.24, -1.57
    out = calibration([(100.0, 2.0), (103.0, 2.0), (110.0, 4.0), (None, 1.0)])
    z = [3 / math.hypot(2, 2), 10 / math.hypot(2, 4), 7 / math.hypot(2, 4)]
    assert (out["repeats"], out["pairs"], out["covered"]) == (3, 3, sum(v < 1.96 for v in z))
    assert out["max_abs_z"] == pytest.approx(max(z))
    assert out["sd_ratio"] == pytest.approx(np.std([100, 103, 110], ddof=1) / math.sqrt(8))


def test_pooled_cv_is_the_pooled_sd_of_the_logs():
    groups = {("a", "M0"): [{"x": 10.0}, {"x": 11.0}, {"x": 12.0}],
              ("b", "M2"): [{"x": 50.0}, {"x": 45.0}]}
    logs = [np.log([10, 11, 12]), np.log([50, 45])]
    expected = math.sqrt(sum(np.var(g, ddof=1) * (len(g) - 1) for g in logs) / 3)
    assert _pooled_cv(groups, "x") == (pytest.approx(expected), 3)
    assert _pooled_cv(groups, "x", ("b", "M2"))[0] == pytest.approx(np.std(logs[0], ddof=1))


def test_later_repeats_run_the_presets_measured_cells_only(tmp_path):
    measured_only(tmp_path / "m.yaml", "lm-eval", 60, "idle_seconds=2")
    raw = yaml.safe_load((tmp_path / "m.yaml").read_text())
    assert list(raw["conditions"]) == ["M0", "M1", "M2", "M3", "M5a"]
    assert raw["execution"] == "lm-eval" and raw["lm_eval"] == {"limit": 60}


def test_derived_cells_add_no_inference_seconds():
    cells = [{"inference_seconds": 10.0, "derived_from": None},
             {"inference_seconds": 4.0, "derived_from": "M0"},
             {"inference_seconds": None, "derived_from": None}]
    assert measured_inference_seconds(cells) == 10.0
