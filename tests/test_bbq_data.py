"""Prepared BBQ rows: counts, metadata join, natural units and the paper fingerprint."""

import json
import os
import subprocess
from collections import Counter, defaultdict

from helpers import PAPER_SAMPLE_SHA256

from lm_eval_ext.data.bbq import load_bbq_rows
from lm_eval_ext.data.external_manifest import manifest_fingerprint


def test_all_rows_prepared(data_dir):
    rows = load_bbq_rows()
    assert len(rows) == 58492
    assert Counter(r["category"] for r in rows)["Race_x_gender"] == 15960
    assert len({r["item_key"] for r in rows}) == 58492


def test_metadata_join_target_loc(data_dir):
    rows = load_bbq_rows()
    missing = [r for r in rows if r["target_loc"] is None]
    # 16 metadata rows say NA; all Gender_identity (duplicated keys collapse to 16 items or fewer)
    assert 0 < len(missing) <= 16 and {r["category"] for r in missing} == {"Gender_identity"}
    first = next(r for r in rows if r["category"] == "Age" and r["example_id"] == 0)
    assert (first["target_loc"], first["unknown_loc"], first["stereotyped_groups"]) == (0, 2, ["old"])


def test_every_unit_is_four_cells_of_one_template(data_dir):
    units = defaultdict(list)
    for row in load_bbq_rows():
        units[row["unit_id"]].append(row)
    assert len(units) == 14623
    cells = {("ambig", "neg"), ("ambig", "nonneg"), ("disambig", "neg"), ("disambig", "nonneg")}
    for rows in units.values():
        assert {(r["context_condition"], r["question_polarity"]) for r in rows} == cells
        assert len({r["question_index"] for r in rows}) == 1


def test_paper_frozen_set_fingerprint(data_dir):
    path = data_dir / "bbq" / "derived" / "vector_frozen_2000_ids.csv"
    assert manifest_fingerprint(path) == PAPER_SAMPLE_SHA256


def test_prepared_rows_are_cached_by_content_and_a_bad_cache_is_ignored(data_dir, tmp_path,
                                                                        monkeypatch):
    from lm_eval_ext.data import bbq

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path))
    bbq._all_rows.cache_clear()
    bbq._load.cache_clear()
    try:
        fresh = bbq._read_rows(data_dir / "bbq")
        assert bbq.load_bbq_rows() == fresh
        [cached] = (tmp_path / "prepared").glob("bbq_rows_*.json")
        assert cached == bbq._prepared_cache_path()
        bbq._all_rows.cache_clear()
        bbq._load.cache_clear()
        assert bbq.load_bbq_rows() == fresh  # from the file this time
        cached.write_bytes(b"not json")
        bbq._all_rows.cache_clear()
        bbq._load.cache_clear()
        assert bbq.load_bbq_rows() == fresh  # a bad file is read around and replaced
        units = frozenset({fresh[0]["unit_id"], fresh[-1]["unit_id"]})
        expected = tuple(r for r in fresh if r["unit_id"] in units)
        assert len(expected) == 8 and bbq.load_bbq_unit_rows(units) == expected
        [own] = set((tmp_path / "prepared").glob("bbq_rows_*.json")) - {cached}
        # the unit set's rows have a file of their own, named after the rows' file
        bbq._all_rows.cache_clear()
        bbq._load.cache_clear()
        cached.unlink()  # read from the unit set's file alone
        assert bbq.load_bbq_unit_rows(units) == expected and not cached.exists()
        own.write_bytes(b"")
        bbq._load.cache_clear()
        assert bbq.load_bbq_unit_rows(units) == expected  # a bad file is read around
        # a file that is valid JSON but not this key's rows is rebuilt, not trusted
        own.write_text(json.dumps({"key": "someone_else", "rows": [{"unit_id": "x"}]}))
        bbq._load.cache_clear()
        assert bbq.load_bbq_unit_rows(units) == expected
        header, rows = own.read_text().split("\n", 1)
        assert json.loads(header)["key"] == own.stem
        # trial 17 (N17_110): one label edited, the file still valid JSON under its key, was
        # used without a word (data fingerprint printed another fingerprint for the pinned data)
        edited = rows.replace('"label": 2', '"label": 0', 1)
        assert edited != rows
        own.write_text(f"{header}\n{edited}")
        bbq._load.cache_clear()
        assert bbq.load_bbq_unit_rows(units) == expected
        assert own.read_text() == f"{header}\n{rows}"  # rebuilt
        assert not any((tmp_path / "prepared").glob("*.pickle"))
    finally:
        bbq._all_rows.cache_clear()
        bbq._load.cache_clear()


def test_a_killed_writers_partial_file_is_removed_at_the_next_write(data_dir, tmp_path,
                                                                   monkeypatch):
    """A killed preparation left a 42 MB ``prepared/*.tmp`` for good. A partial file
    of a process that is gone is removed when the next cache file is written; one of a live
    process (this one) is left alone."""
    from lm_eval_ext.data import bbq

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path))
    folder = tmp_path / "prepared"
    folder.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = folder / f"bbq_rows_0123.{gone.pid}.tmp"
    live = folder / f"bbq_rows_4567.{os.getpid()}.tmp"
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    bbq._load.cache_clear()
    try:
        rows = bbq.load_bbq_unit_rows(frozenset({load_bbq_rows()[0]["unit_id"]}))
    finally:
        bbq._load.cache_clear()
        bbq._all_rows.cache_clear()
    assert not stale.exists() and live.exists()
    assert list(folder.glob("*.json")) and len(rows) == 4


def test_the_fewshot_pool_comes_from_its_cache_file_and_equals_a_fresh_draw(data_dir,
                                                                            monkeypatch):
    import pytest

    from lm_eval_ext.data.instrument import load_manifest, load_membership
    from lm_eval_ext.tasks.bbq import utils
    from lm_eval_ext.tasks.common.prompting import fewshot_pool

    units = frozenset(r["unit_id"] for r in load_membership("25pct").rows)
    instrument = set(load_manifest()["memberships"]["instrument"]["unit_ids"])
    fresh = fewshot_pool(load_bbq_rows(), exclude=instrument | units, size=22,
                         stratum=lambda r: r["category"], unit=lambda r: r["unit_id"],
                         alternate=utils.context_condition)
    utils._pool_rows.cache_clear()
    try:
        utils._pool_rows(units)  # drawn (or read) and kept on disk
        utils._pool_rows.cache_clear()
        monkeypatch.setattr(utils, "load_bbq_rows", lambda: pytest.fail("read every row"))
        cached = utils._pool_rows(units)  # from the file
    finally:
        utils._pool_rows.cache_clear()
    assert list(cached) == fresh and len({r["category"] for r in fresh}) == 11


def test_the_shots_lm_eval_shows_mix_ambiguous_and_disambiguated_items(data_dir):
    """Trial 18 (N18_42): the first 3 shots were all ambiguous items, whose answer is always
    "unknown" (4 of the first 5): a 3-shot run taught "unknown". Counted on the docs lm-eval's
    own sampler shows (its first_n), with the answer read from BBQ's unknown option."""
    from lm_eval.tasks import TaskManager

    task = TaskManager().load(["bbq_subset_25pct"])["tasks"]["bbq_subset_25pct"]
    pool = list(task.fewshot_docs())
    unknown = [d["answer_info"][f"ans{d['label']}"][1] == "unknown" for d in pool]  # BBQ's tag
    conditions = [d["context_condition"] for d in pool]
    assert conditions[:5] == ["ambig", "disambig", "ambig", "disambig", "ambig"]
    assert conditions.count("ambig") == conditions.count("disambig") == 11
    assert sum(unknown[:3]) == 2 and sum(unknown[:5]) == 3
    by_category = {(d["category"], d["context_condition"]) for d in pool}
    assert len(by_category) == 22  # each of the 11 categories: one of each condition
