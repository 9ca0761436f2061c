"""benchmarks/stress_test.py's per-condition limits and its full-instrument projection."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stress_test import preset_mapping, projections  # noqa: E402


def test_condition_limits_override_the_campaign_limit_per_condition():
    mapping = preset_mapping("generative", 100, {"M0": 900, "M2": 24, "M4_12p5pct*": 50})
    conditions = mapping["conditions"]
    assert mapping["lm_eval"] == {"limit": 100}
    assert (conditions["M0"]["limit"], conditions["M2"]["limit"]) == (900, 24)
    assert [c for c, v in conditions.items() if v.get("limit") == 50] == [
        "M4_12p5pct_r1", "M4_12p5pct_r2", "M4_12p5pct_r3", "M4_12p5pct_r4", "M4_12p5pct_r5"]
    assert "limit" not in conditions["M1"] and mapping["tasks"] == ["bbq_instrument"]


def test_a_cells_projection_is_its_own_rate_and_a_derived_ones_its_rechecks():
    cells = [{"cell_id": "m__M0__t", "derived_from": None, "n_items": 100,
              "inference_seconds": 20.0, "wall_seconds": 30.0, "recheck": None},
             {"cell_id": "m__M4__s", "derived_from": "m__M0__t", "n_items": 100,
              "inference_seconds": 19.0, "wall_seconds": 8.0,
              "recheck": {"rechecked_items": 10, "recheck_inference_seconds": 3.0}}]
    planned = {"full_instrument": [{"cell_id": "m__M0__t", "items": 2000, "seconds": 350.0},
                                   {"cell_id": "m__M4__s", "items": 1500, "seconds": 40.0}],
               "this_campaign": [{"cell_id": "m__M0__t", "seconds": 28.0}]}
    m0, m4 = projections(cells, planned)
    # M0: 0.2 s an item x 2,000 items, plus its 10 s outside inference
    assert (m0["projected_inference_seconds"], m0["projected_wall_seconds"]) == (400.0, 410.0)
    assert (m0["dry_run_full_estimate_seconds"], m0["dry_run_estimate_seconds"]) == (350.0, 28.0)
    # M4: its re-check's 0.3 s an item x the full cell's re-check (5% of 1,500: 75 items)
    assert m4["full_items_run"] == 75
    assert m4["projected_inference_seconds"] == pytest.approx(22.5)
    assert m4["projected_wall_seconds"] == pytest.approx(22.5 + 8.0 - 3.0)
    assert m4["dry_run_estimate_seconds"] is None
