"""Data flows one way: no module imports a package of a higher layer, no import cycles; test
files import their shared helpers from one module, not from each other.

Read from the source with ``ast`` (imports inside functions count too), so the check needs
nothing installed: ``python -m pytest tests/test_layers.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lm_eval_ext"

#: lowest first; a module may import its own layer and the ones below
LAYERS = (
    ("__init__", "errors", "paths", "cards", "files", "strict_yaml", "answers", "outputs"),
    ("data",),
    ("tasks",),
    ("generation", "metering"),  # decoding (public transformers APIs); energy, backend-free
    ("backends",),  # the lm-eval models: hf/, vllm/ and what they share
    ("command_preflight", "lm_eval_inputs", "task_building",  # checked before the model loads
     "response_cache"),
    ("plugin",),  # how we plug into lm-eval: every write into it (plugin/__init__.py lists them)
    ("analysis",),
    ("cross_harness", "export", "judge"),
    ("campaign",),
    ("cli",),  # the command line
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every ``lm_eval_ext`` module this file imports (``from pkg import mod``: ``pkg.mod``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("lm_eval_ext")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lm_eval_ext"):
            submodules = {f"{node.module}.{a.name}" for a in node.names} & modules
            names = [a.name for a in node.names if f"{node.module}.{a.name}" not in modules]
            found |= submodules | ({node.module} if names else set())
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path, set(files)) if m != name}
            for name, path in files.items()}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_module_has_a_layer():
    tops = {_top(m) for m in _graph()}
    assert tops <= set(RANK), f"give these a layer: {sorted(tops - set(RANK))}"


def test_no_module_imports_a_higher_layer():
    upward = sorted(f"{m} -> {d}" for m, deps in _graph().items() for d in deps
                    if RANK[_top(d)] > RANK[_top(m)])
    assert upward == []


def test_no_import_cycles_between_modules():
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(trail[trail.index(dep):] + [dep] if dep in trail else [node, dep])
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_test_files_import_their_helpers_not_each_other():
    """What several test files share lives in ``tests/helpers.py`` (or a fixture builder)."""
    tests = Path(__file__).resolve().parent
    names = {p.stem for p in tests.glob("test_*.py")}
    imported = {f"{path.name} -> {node.module if isinstance(node, ast.ImportFrom) else a.name}"
                for path in sorted(tests.glob("test_*.py"))
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.Import | ast.ImportFrom)
                for a in node.names
                if (node.module if isinstance(node, ast.ImportFrom) else a.name) in names}
    assert sorted(imported) == []
