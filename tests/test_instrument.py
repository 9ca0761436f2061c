"""The frozen instrument: determinism, nesting, balance, memberships, fingerprints."""

import json
from collections import Counter

import pytest

from lm_eval_ext.cli.main import main
from lm_eval_ext.data import instrument
from lm_eval_ext.data.fingerprints import membership_fingerprint
from lm_eval_ext.errors import ManifestError


@pytest.fixture(scope="module")
def manifest(data_dir):
    return instrument.load_manifest()


def test_committed_manifest_reproduces_from_the_data(manifest):
    assert instrument.build_manifest() == manifest


def test_sizes_and_nesting(manifest):
    m = manifest["memberships"]
    assert (m["instrument"]["units"], m["instrument"]["rows"]) == (500, 2000)
    chain = ["instrument", "75pct", "50pct", "37p5pct", "25pct", "12p5pct"]
    assert [m[n]["rows"] for n in chain] == [2000, 1500, 1000, 748, 500, 248]
    for parent, child in zip(chain, chain[1:], strict=False):
        assert set(m[child]["unit_ids"]) < set(m[parent]["unit_ids"]), (child, parent)
        assert m[child]["parent"] == parent


def test_category_balance(manifest):
    for name, record in manifest["memberships"].items():
        per_category = Counter(u.split(":")[0] for u in record["unit_ids"])
        assert len(per_category) == 11, name
        assert max(per_category.values()) - min(per_category.values()) <= 1, name
        assert per_category == record["category_units"]


def test_five_distinct_memberships_at_50pct_and_smallest(manifest):
    m = manifest["memberships"]
    for base in ("50pct", "12p5pct"):
        names = [base] + [f"{base}_r{r}" for r in range(2, 6)]
        sets = [frozenset(m[n]["unit_ids"]) for n in names]
        assert len(set(sets)) == 5
        assert all(s <= set(m["instrument"]["unit_ids"]) for s in sets)
        assert len({m[n]["membership_sha256"] for n in names}) == 5


def test_membership_fingerprints_recompute(manifest):
    # by hand with hashlib (the recipe the docs give), not the package's function
    import hashlib

    for record in manifest["memberships"].values():
        text = "".join(f"{unit}\n" for unit in sorted(record["unit_ids"]))
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == record["membership_sha256"]
        assert membership_fingerprint(record["unit_ids"]) == record["membership_sha256"]


def test_membership_rows_are_whole_units(data_dir):
    loaded = instrument.load_membership("25pct")
    assert len(loaded.rows) == 500
    per_unit = Counter(r["unit_id"] for r in loaded.rows)
    assert set(per_unit.values()) == {4} and len(per_unit) == 125


def _edited(manifest, path):
    edited = json.loads(json.dumps(manifest))
    units = edited["memberships"]["25pct"]["unit_ids"]
    units[0] = "Age:0" if units[0] != "Age:0" else "Age:1"
    instrument.write_manifest(edited, path)


def test_edited_manifest_is_rejected_and_the_advised_rebuild_restores_it(manifest, tmp_path,
                                                                         monkeypatch, capsys):
    path = tmp_path / "bbq_instrument_v1.json"
    monkeypatch.setattr(instrument, "MANIFEST_PATH", path)  # the package's own, in a copy
    _edited(manifest, path)
    with pytest.raises(ManifestError, match="'25pct'.*; the manifest was edited. Rebuild it with "
                       "`lm-eval-ext data instrument --write`"):
        instrument.load_manifest()
    assert main(["data", "instrument", "--write"]) == 0  # the advice, followed
    assert instrument.load_manifest() == manifest
    assert main(["data", "verify", "bbq"]) == 0
    assert "reproduces from the data" in capsys.readouterr().out


def test_a_manifest_that_no_longer_reproduces_is_named_and_rebuilt(manifest, tmp_path,
                                                                   monkeypatch, capsys):
    path = tmp_path / "bbq_instrument_v1.json"
    monkeypatch.setattr(instrument, "MANIFEST_PATH", path)
    stale = json.loads(json.dumps(manifest))
    stale["source"]["commit"] = "0" * 40  # consistent fingerprints, other content
    instrument.write_manifest(stale, path)
    with pytest.raises(ManifestError, match="does not reproduce from the verified BBQ files; "
                       "reinstall lm-eval-ext \\(or rebuild it with `lm-eval-ext data "
                       "instrument --write` if you changed the algorithm"):
        instrument.check_reproduces()
    assert main(["data", "instrument", "--write"]) == 0
    instrument.check_reproduces()


@pytest.mark.parametrize("text", ["{}", "[]", '{"memberships": [1, 2]}'])
def test_a_manifest_of_the_wrong_shape_is_one_line(tmp_path, text):
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(ManifestError, match="not an instrument manifest\\); reinstall"):
        instrument.load_manifest(path)


def test_unknown_membership_lists_the_known_ones(data_dir):
    with pytest.raises(ManifestError, match="unknown BBQ membership '33pct'") as err:
        instrument.load_membership("33pct")
    assert all(name in str(err.value) for name in ("full", "instrument", "25pct", "50pct_r5"))
