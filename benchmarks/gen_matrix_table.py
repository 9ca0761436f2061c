"""Issue 22's throughput matrix as one Markdown table, from ``gen_throughput.py`` JSON files.

One row per (model, precision, path@batch): rounds, median inference seconds, new tokens/s,
J/item, J/new token, idle share, and the identical-text share against the file's reference; per
(model, batch) the fast path's new tokens/s against the best of transformers' ``generate``
modes measured in the same file (the issue's "within 10%"). Figures are the files' own medians.

    python benchmarks/gen_matrix_table.py benchmarks/results/gen_2026-12-02_matrix/*.json \\
        --out benchmarks/results/gen_2026-12-02_matrix/matrix.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PLAIN = ("generate", "generate_static")
COLUMNS = ("model", "precision", "items", "condition", "rounds", "inference s", "new tokens/s",
           "J/item", "J/new token", "idle share", "same text as reference", "fast / best generate")


def precision_of(command: str) -> str:
    """The ``--precision`` a recorded command line ran with."""
    words = command.split()
    return words[words.index("--precision") + 1] if "--precision" in words else "bf16"


def fast_against_plain(summary: dict) -> dict[str, float]:
    """``fast@B``'s new tokens/s over the best ``generate`` mode's at the same batch ``B``."""
    ratios = {}
    for key, row in summary.items():
        path, batch = key.split("@")
        plain = [summary[f"{p}@{batch}"]["new_tokens_per_s"] for p in PLAIN
                 if f"{p}@{batch}" in summary]
        if path == "fast" and plain:
            ratios[key] = row["new_tokens_per_s"] / max(plain)
    return ratios


def rows_of(payload: dict) -> list[list[str]]:
    """The table's rows for one ``gen_throughput.py`` file."""
    summary, reference = payload.get("summary", {}), payload["reference"]
    ratios = fast_against_plain(summary)
    rows = []
    for key, s in summary.items():
        same = s.get(f"identical_to_{reference}")
        rows.append([
            payload["model"], precision_of(payload["command"]), str(s["items"]), f"`{key}`",
            str(s["rounds"]), f"{s['inference_seconds']:.2f}", f"{s['new_tokens_per_s']:,.1f}",
            _fixed(s.get("j_per_item"), 2), _fixed(s.get("j_per_new_token"), 3),
            _fixed(s.get("idle_share"), 2),
            "reference" if key == reference else f"{same} of {s.get('compared_items', s['items'])}",
            f"{ratios[key]:.2f}" if key in ratios else ""])
    return rows


def _fixed(value: float | None, places: int) -> str:
    return "" if value is None else f"{value:,.{places}f}"


def gpu_uuids(payload: dict) -> set[str]:
    """The GPUs a file's runs were metered on."""
    return {g["uuid"] for run in payload["runs"] for g in run.get("gpus") or []}


def table(paths: list[Path]) -> str:
    """The Markdown table (and the files and GPUs it comes from) for ``paths``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    uuids: set[str] = set()
    labels: dict[str, str] = {}
    for path in paths:
        payload = json.loads(path.read_text())
        uuids |= gpu_uuids(payload)
        if "label" in payload:
            labels[payload["model"]] = payload["label"]
        lines += ["| " + " | ".join(row) + " |" for row in rows_of(payload)]
    sources = ", ".join(f"`{p.name}`" for p in paths)
    notes = [f"{model}: {label}." for model, label in labels.items()]
    return "\n".join([f"Medians per condition from {sources}; GPU {', '.join(sorted(uuids))}.",
                      *notes, "", *lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(table(args.files))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
