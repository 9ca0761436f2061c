"""The frozen BBQ instrument and its nested subsets (algorithm ``bbq-instrument/v1``).

Algorithm (deterministic; no RNG, only SHA-256):

1. **Units.** A natural unit is one BBQ template instance: the 4 rows
   ``{ambig, disambig} x {neg, nonneg}`` sharing ``category`` and ``example_id // 4``
   (unit id ``"{category}:{example_id // 4}"``).
2. **Rank.** Within a category, units are ranked by
   ``sha256("{namespace}|{seed}|{scope}|{category}|{unit_id}")`` ascending (ties: unit id).
3. **Quotas.** The 11 categories are ordered by ``sha256("{namespace}|{seed}|category|{c}")``;
   ``base, rem = divmod(n_units, 11)``; the first ``rem`` categories get ``base + 1`` units,
   the rest ``base``. Each category contributes its top-``quota`` ranked units.
4. **Instrument.** 500 units (2,000 rows) from all 14,623 BBQ units, ``scope="instrument"``.
5. **Nested subsets.** From the instrument's units with ``scope="subset"``: 375, 250, 187,
   125 and 62 units (75/50/37.5/25/12.5%; 1,500/1,000/748/500/248 rows). One ranking and
   order-consistent quotas make them nested (checked when built).
6. **Replicates.** At 50% and 12.5%, replicates 2-5 use seed ``"{seed}-rep{r}"`` (independent
   draws from the instrument, so not nested; they must differ from earlier replicates).

Each membership records ``membership_sha256`` (sorted unit ids) and ``sample_sha256`` (the
paper's row fingerprint). Both are checked whenever a membership is loaded.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lm_eval_ext.data.bbq import load_bbq_rows, load_bbq_unit_rows
from lm_eval_ext.data.fingerprints import membership_fingerprint, sample_fingerprint
from lm_eval_ext.data.sources import BBQ, BBQ_CATEGORIES
from lm_eval_ext.errors import ManifestError

NAMESPACE = "lm-eval-ext/bbq-instrument/v1"
SEED = "20261129"
INSTRUMENT_UNITS = 500
#: (membership name, units, nominal fraction of the instrument)
SUBSETS: tuple[tuple[str, int, float], ...] = (
    ("75pct", 375, 0.75),
    ("50pct", 250, 0.50),
    ("37p5pct", 187, 0.375),
    ("25pct", 125, 0.25),
    ("12p5pct", 62, 0.125),
)
REPLICATED = ("50pct", "12p5pct")
N_REPLICATES = 5
MANIFEST_PATH = Path(__file__).resolve().parent / "manifests" / "bbq_instrument_v1.json"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def category_order(seed: str, categories: Iterable[str] = BBQ_CATEGORIES) -> list[str]:
    """Categories ordered by their seeded hash (who gets the remainder units)."""
    return sorted(categories, key=lambda c: (_sha(f"{NAMESPACE}|{seed}|category|{c}"), c))


def balanced_quotas(n_units: int, ordered_categories: Sequence[str]) -> dict[str, int]:
    """``divmod(n_units, k)`` quotas; the first ``rem`` categories in order get one more."""
    base, rem = divmod(n_units, len(ordered_categories))
    return {c: base + (1 if i < rem else 0) for i, c in enumerate(ordered_categories)}


def select_units(
    units_by_category: Mapping[str, Iterable[str]], n_units: int, *, seed: str, scope: str
) -> list[str]:
    """Category-balanced, hash-ranked selection of ``n_units`` natural units."""
    order = category_order(seed, units_by_category.keys())
    quotas = balanced_quotas(n_units, order)
    selected: list[str] = []
    for category in order:
        pool = sorted(
            units_by_category[category],
            key=lambda u: (_sha(f"{NAMESPACE}|{seed}|{scope}|{category}|{u}"), u),
        )
        if len(pool) < quotas[category]:
            raise ManifestError(
                f"category {category} has {len(pool)} units, fewer than its quota "
                f"{quotas[category]} for a {n_units}-unit selection"
            )
        selected.extend(pool[: quotas[category]])
    return sorted(selected)


def _units_by_category(unit_ids: Iterable[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for unit in unit_ids:
        grouped[unit.split(":", 1)[0]].append(unit)
    return dict(grouped)


def _complete_units(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    by_unit: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_unit[row["unit_id"]].append(row)
    return {u: rs for u, rs in by_unit.items() if len(rs) == 4}


def _membership_record(
    unit_ids: list[str],
    rows_by_unit: Mapping[str, list[Mapping[str, Any]]],
    *,
    fraction: float,
    parent: str | None,
    seed: str,
    replicate: int,
) -> dict[str, Any]:
    rows = [r for u in unit_ids for r in rows_by_unit[u]]
    per_category = defaultdict(int)
    for unit in unit_ids:
        per_category[unit.split(":", 1)[0]] += 1
    return {
        "fraction": fraction,
        "units": len(unit_ids),
        "rows": len(rows),
        "parent": parent,
        "seed": seed,
        "replicate": replicate,
        "category_units": dict(sorted(per_category.items())),
        "membership_sha256": membership_fingerprint(unit_ids),
        "sample_sha256": sample_fingerprint(rows),
        "unit_ids": unit_ids,
    }


def build_manifest(rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Run the algorithm on the prepared BBQ rows and return the manifest (IDs only)."""
    rows = load_bbq_rows() if rows is None else rows
    rows_by_unit = _complete_units(rows)
    instrument = select_units(
        _units_by_category(rows_by_unit), INSTRUMENT_UNITS, seed=SEED, scope="instrument"
    )
    memberships: dict[str, Any] = {
        "instrument": _membership_record(
            instrument, rows_by_unit, fraction=1.0, parent=None, seed=SEED, replicate=1
        )
    }
    parent = "instrument"
    for name, n_units, fraction in SUBSETS:
        units = select_units(_units_by_category(instrument), n_units, seed=SEED, scope="subset")
        if not set(units) <= set(memberships[parent]["unit_ids"]):
            raise ManifestError(f"subset {name} is not nested in {parent}")
        memberships[name] = _membership_record(
            units, rows_by_unit, fraction=fraction, parent=parent, seed=SEED, replicate=1
        )
        parent = name
        if name in REPLICATED:
            earlier = [set(units)]
            for rep in range(2, N_REPLICATES + 1):
                rep_seed = f"{SEED}-rep{rep}"
                rep_units = select_units(
                    _units_by_category(instrument), n_units, seed=rep_seed, scope="subset"
                )
                if set(rep_units) in earlier:
                    raise ManifestError(f"replicate {rep} of {name} repeats an earlier one")
                earlier.append(set(rep_units))
                memberships[f"{name}_r{rep}"] = _membership_record(
                    rep_units, rows_by_unit, fraction=fraction, parent=None,
                    seed=rep_seed, replicate=rep,
                )
    return {
        "schema_version": 1,
        "name": "bbq-instrument",
        "version": "v1",
        "dataset": "bbq",
        "source": {"repo": BBQ.repo, "commit": BBQ.commit, "rows": len(rows),
                   "sample_sha256": sample_fingerprint(rows)},
        "membership_unit": "{category}:{example_id // 4} (4 rows: ambig/disambig x neg/nonneg)",
        "algorithm": {
            "namespace": NAMESPACE,
            "seed": SEED,
            "ranking": "sha256('{namespace}|{seed}|{scope}|{category}|{unit_id}') ascending",
            "quotas": "divmod(n_units, 11) over categories ordered by "
                      "sha256('{namespace}|{seed}|category|{category}')",
            "instrument_units": INSTRUMENT_UNITS,
            "subsets": [{"name": n, "units": u, "fraction": f} for n, u, f in SUBSETS],
            "replicated": list(REPLICATED),
            "replicates": N_REPLICATES,
        },
        "memberships": memberships,
    }


def write_manifest(manifest: Mapping[str, Any], path: Path | None = None) -> None:
    """Write a manifest as stable, sorted JSON (to the package's own by default)."""
    (path or MANIFEST_PATH).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")


def load_manifest(path: Path | None = None) -> dict[str, Any]:
    """The package's manifest (or ``path``), with every membership's fingerprint checked."""
    path = Path(path or MANIFEST_PATH)
    try:
        return _read_manifest(path, path.stat().st_mtime_ns)
    except OSError as exc:
        raise ManifestError(f"cannot read subset manifest {path}: {exc}") from exc


@lru_cache(maxsize=4)
def _read_manifest(path: Path, mtime_ns: int) -> dict[str, Any]:
    """One version of a manifest file (``mtime_ns`` keys the cache: a rewrite is read again)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        memberships = {name: (record["unit_ids"], record["membership_sha256"])
                       for name, record in manifest["memberships"].items()}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"cannot read subset manifest {path}: {exc!r} (not an instrument "
                            "manifest); reinstall lm-eval-ext") from exc
    for name, (unit_ids, recorded) in memberships.items():
        actual = membership_fingerprint(unit_ids)
        if actual != recorded:
            raise ManifestError(
                f"{path}: membership {name!r} lists units whose fingerprint is {actual}, but "
                f"the manifest records {recorded}; the manifest was edited. Rebuild it with "
                "`lm-eval-ext data instrument --write` (or reinstall lm-eval-ext)."
            )
    return manifest


def check_reproduces() -> None:
    """The package's manifest must rebuild from the verified BBQ files (else an error)."""
    if build_manifest() != load_manifest():
        raise ManifestError(
            f"the instrument manifest {MANIFEST_PATH} does not reproduce from the verified BBQ "
            "files; reinstall lm-eval-ext (or rebuild it with `lm-eval-ext data instrument "
            "--write` if you changed the algorithm)")


def membership_names(path: Path | None = None) -> list[str]:
    """Names of the memberships in a manifest (``instrument``, ``25pct``, ``50pct_r2``...)."""
    return list(load_manifest(path)["memberships"])


@dataclass(frozen=True)
class Membership:
    """A verified membership and its prepared rows (sorted by category, example_id)."""

    name: str
    membership_sha256: str
    sample_sha256: str
    rows: tuple[Mapping[str, Any], ...]


def load_membership(name: str, path: Path | None = None) -> Membership:
    """Expand a membership into prepared rows, checking both fingerprints."""
    path = path or MANIFEST_PATH
    manifest = load_manifest(path)
    if name == "full":
        rows = load_bbq_rows()
        expected = manifest["source"]["sample_sha256"]
        actual = sample_fingerprint(rows)
        if actual != expected:
            raise ManifestError(
                f"the BBQ data gives sample fingerprint {actual}, but {path} expects {expected} "
                "for the full set; the data files differ from the pinned upstream files."
            )
        return Membership("full", membership_fingerprint({r["unit_id"] for r in rows}),
                          actual, tuple(rows))
    records = manifest["memberships"]
    if name not in records:
        raise ManifestError(
            f"unknown BBQ membership {name!r} in {path}; known: full, {', '.join(records)}"
        )
    record = records[name]
    rows = load_bbq_unit_rows(frozenset(record["unit_ids"]))  # checked just below
    actual = sample_fingerprint(rows)
    if len(rows) != record["rows"] or actual != record["sample_sha256"]:
        raise ManifestError(
            f"membership {name!r} of {path} expands to {len(rows)} rows with sample "
            f"fingerprint {actual}; the manifest records {record['rows']} rows and "
            f"{record['sample_sha256']}. The BBQ data differs from the pinned upstream files."
        )
    return Membership(name, record["membership_sha256"], actual, rows)
