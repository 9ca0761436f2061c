"""Only ``lm_eval_ext/plugin/`` writes into lm-eval (its docstring lists each write).

Read from the source with ``ast``: an assignment, ``del``, ``setattr`` or ``delattr`` on a name
bound to lm-eval (an imported module, class or function, or what a module makes from one) is a
write into lm-eval, and so is ``wrap_once("lm_eval...", ...)`` (``plugin/wrapping.py``). Our
model classes are lm-eval objects too: the attributes their own code sets must not be ones
lm-eval's classes in their MRO set or define.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lm_eval_ext"
PLUGIN = PACKAGE / "plugin"


def _root(node: ast.AST) -> str | None:
    """The name an attribute, subscript or call chain starts from (``a`` of ``a.b[0].c()``)."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _lm_eval_names(tree: ast.AST) -> set[str]:
    """Names bound to lm-eval: its imports, and names assigned from an expression of one."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] == "lm_eval"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lm_eval":
            names |= {a.asname or a.name for a in node.names}
    assignments = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    while True:
        more = {t.id for n in assignments if _root(n.value) in names
                for t in n.targets if isinstance(t, ast.Name)} - names
        if not more:
            return names
        names |= more


def lm_eval_writes(source: str) -> list[str]:
    """Each write into lm-eval in ``source``: ``line: code``."""
    tree = ast.parse(source)
    names = _lm_eval_names(tree)
    imported = _lm_eval_names(ast.Module(body=[n for n in ast.walk(tree)
                                                if isinstance(n, ast.Import | ast.ImportFrom)]))

    def into_lm_eval(target: ast.AST) -> bool:
        """An attribute of an lm-eval object, or an item of a container lm-eval holds."""
        if isinstance(target, ast.Subscript):  # not a dict that an lm-eval function returned
            return (isinstance(target.value, ast.Attribute) and _root(target) in names
                    or _root(target) in imported)
        return isinstance(target, ast.Attribute) and _root(target) in names

    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and node.args
              and ((isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"))
                   or (isinstance(node.func, ast.Attribute)
                       and node.func.attr in ("__setattr__", "__delattr__")))):
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        found += [f"{node.lineno}: {ast.unparse(node)[:80]}" for t in targets if into_lm_eval(t)]
        if _wraps_lm_eval(node):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _wraps_lm_eval(node: ast.AST) -> bool:
    """``wrap_once("lm_eval...", attribute)``: the plug-in's way to replace an lm-eval attribute."""
    return (isinstance(node, ast.Call) and bool(node.args)
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "wrap_once"
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).split(".")[0] == "lm_eval")


def test_no_module_outside_the_plugin_writes_into_lm_eval():
    outside = {str(p.relative_to(PACKAGE.parent)): lm_eval_writes(p.read_text(encoding="utf-8"))
               for p in sorted(PACKAGE.rglob("*.py")) if PLUGIN not in p.parents}
    assert {path: writes for path, writes in outside.items() if writes} == {}


def test_the_scan_sees_each_kind_of_write():
    """The plug-in's own writes are found (the scan can fail)."""
    source = textwrap.dedent("""
        import lm_eval.evaluator
        from lm_eval.tasks import TaskManager as TM
        from lm_eval_ext.errors import ConfigError
        lm_eval.evaluator.get_git_commit_hash = str
        TM.__init__ = None
        manager = TM(include_defaults=False)
        manager.task_index["x"] = 1
        setattr(TM, "all_tasks", [])
        ConfigError.note = "ours: not a write into lm-eval"
        settings = TM.defaults()
        settings["ours"] = "a fresh dict lm-eval returned: not a write into it"
        del manager.tag
        @wrap_once("lm_eval.evaluator", "get_git_commit_hash")
        def quiet(original): return str
        wrapping.wrap_once("sys", "excepthook")(quiet)  # not lm-eval's
    """)
    assert sorted(int(w.split(":")[0]) for w in lm_eval_writes(source)) == [5, 6, 8, 9, 13, 14]
    plugin_writes = sum(len(lm_eval_writes(p.read_text(encoding="utf-8")))
                        for p in PLUGIN.rglob("*.py"))
    # TaskManager.__init__, log_experiment_args, the two save methods, get_git_commit_hash
    assert plugin_writes >= 5


def _self_assigned(cls: type) -> set[str]:
    """Attributes ``cls``'s own methods assign on ``self``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {t.attr for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == "self"}


@pytest.mark.parametrize("model", ["hf-metered", "hf-multimodal-metered"])
def test_our_model_classes_set_no_attribute_of_lm_eval(model):
    import importlib

    from lm_eval_ext.backends.lm_eval_names import MODELS

    module, name = MODELS[model].split(":")
    cls = getattr(importlib.import_module(module), name)
    ours = [c for c in cls.__mro__ if c.__module__.startswith("lm_eval_ext.")]
    theirs = [c for c in cls.__mro__ if c.__module__.startswith("lm_eval.")]
    lm_eval_attributes = set().union(*(_self_assigned(c) | set(vars(c)) for c in theirs))
    clashes = {c.__qualname__: sorted(_self_assigned(c) & lm_eval_attributes) for c in ours}
    assert {name: attrs for name, attrs in clashes.items() if attrs} == {}
