"""benchmarks/gen_throughput.py's conditions and summary (the device runs are in the results map)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gen_throughput import parse_conditions, summarise, whole_round_fits  # noqa: E402


def _row(path, batch, seconds):
    return {"path": path, "batch_size": batch, "inference_seconds": seconds, "items_per_s": 1.0,
            "new_tokens_per_s": 10.0 / seconds, "j_per_item": None, "j_per_new_token": None,
            "idle_share": 0.5, "forward_share": 0.9}


def test_conditions_take_their_own_item_counts_or_the_limit():
    assert parse_conditions("standard@32,fast@auto,generate@1:30", 200) == [
        ("standard", 32, 200), ("fast", "auto", 200), ("generate", 1, 30)]
    assert parse_conditions("fast@8", None) == [("fast", 8, None)]


@pytest.mark.parametrize("text", ["fast", "fast@", "fast@x", "fast@8:", "fast@8:a", "fast@8:0", "@8",
                                  "fast@8,fast@8:3"])
def test_bad_conditions_are_one_line(text):
    with pytest.raises(SystemExit, match="gen_throughput: "):
        parse_conditions(text, None)


def test_summary_compares_texts_on_the_items_both_conditions_ran():
    runs = [_row("standard", 32, s) for s in (3.0, 1.0, 2.0)] + [_row("standard", 1, 4.0),
                                                                 _row("fast", 32, 5.0)]
    texts = {"standard@32": list("abcd"), "standard@1": list("ax"), "fast@32": list("abcdef")}
    summary = summarise(runs, texts, "standard@32")
    assert summary["standard@32"]["inference_seconds"] == 2.0
    assert summary["standard@32"]["rounds"] == 3
    assert summary["standard@1"]["identical_to_standard@32"] == 1
    assert "compared_items" not in summary["standard@1"]
    assert summary["fast@32"]["identical_to_standard@32"] == 4
    assert (summary["fast@32"]["items"], summary["fast@32"]["compared_items"]) == (6, 4)
    assert "j_per_item" not in summary["fast@32"]


def test_a_later_round_starts_only_when_all_of_it_fits_with_its_margin():
    last = {"standard@1": 20.0, "fast@1": 5.0}  # 1.3 x 25 s = 32.5 s
    assert whole_round_fits(last, ["fast@1", "standard@1"], 33.0)
    assert not whole_round_fits(last, ["fast@1", "standard@1"], 32.0)
    assert not whole_round_fits(last, ["fast@1", "standard@1", "generate@1"], 1e9)  # never ran
