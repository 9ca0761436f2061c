"""A real HELM run folder without benchmark text: redacted here, rehydrated in the tests.

HELM's ``scenario_state.json`` holds BBQ's text. The committed fixture keeps what the reader
uses (instance ids, splits, reference tags, letter mappings, the model's completions) and
replaces every BBQ text by a reference ``<<item_key|field>>``; the tests rebuild the text from
the local BBQ copy and check the SHA-256 of the rebuilt file against the original's, so the
reader is tested on exactly what HELM wrote.

    python tests/helm_fixture.py HELM_RUN_DIR tests/fixtures/helm_bbq_smollm2   # once
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

KEEP = ("run_spec.json", "stats.json")
_REF = re.compile(r"<<(bbq:[^|]+)\|(\w+)>>")


def _reduced(state: dict[str, Any]) -> dict[str, Any]:
    """The fields of scenario_state.json that the HELM reader reads."""
    return {"request_states": [{
        "instance": {"id": rs["instance"]["id"], "split": rs["instance"]["split"],
                     "input": {"text": rs["instance"]["input"]["text"]},
                     "references": [{"output": {"text": r["output"]["text"]}, "tags": r["tags"]}
                                    for r in rs["instance"]["references"]]},
        "output_mapping": rs.get("output_mapping"),
        "result": {"completions": [{"text": c["text"]}
                                   for c in (rs.get("result") or {}).get("completions", [])]},
    } for rs in state["request_states"]]}


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _input_text(row: dict[str, Any]) -> str:
    return f"{row['context']}\nQuestion: {row['question']}"


def redact(run_dir: Path, out: Path) -> None:
    """Write the redacted fixture of a HELM bbq run (needs the reader's content match)."""
    from lm_eval_ext.cross_harness.readers import _helm_bbq_key
    from lm_eval_ext.data.bbq import row_of_item_key

    out.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        shutil.copy(run_dir / name, out / name)
    reduced = _reduced(json.loads((run_dir / "scenario_state.json").read_text()))
    sha = hashlib.sha256(_dumps(reduced).encode()).hexdigest()
    for rs in reduced["request_states"]:
        key, _ = _helm_bbq_key(rs["instance"])
        row = row_of_item_key(key)
        assert rs["instance"]["input"]["text"] == _input_text(row), key
        rs["instance"]["input"]["text"] = f"<<{key}|input>>"
        by_text = {row[f"ans{i}"]: f"<<{key}|ans{i}>>" for i in range(3)}
        for ref in rs["instance"]["references"]:
            ref["output"]["text"] = by_text[ref["output"]["text"]]
        rs["output_mapping"] = {k: by_text[v] for k, v in rs["output_mapping"].items()}
    (out / "scenario_state.redacted.json").write_text(_dumps(reduced))
    (out / "scenario_state.sha256").write_text(sha + "\n")


def rehydrate(fixture: Path, out: Path) -> str:
    """Rebuild the run folder from the local BBQ copy; returns the rebuilt file's SHA-256."""
    from lm_eval_ext.data.bbq import row_of_item_key

    def fill(match: re.Match) -> str:
        row = row_of_item_key(match.group(1))
        return _input_text(row) if match.group(2) == "input" else row[match.group(2)]

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _REF.sub(fill, value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    out.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        shutil.copy(fixture / name, out / name)
    state = walk(json.loads((fixture / "scenario_state.redacted.json").read_text()))
    text = _dumps(state)
    (out / "scenario_state.json").write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    redact(Path(sys.argv[1]), Path(sys.argv[2]))
