"""Start-up hook that plugs lm-eval-ext into the stock ``lm_eval`` command.

lm-eval 0.4.13 has no plugin discovery, so the wheel ships ``lm_eval_ext_autoload.pth``,
which imports this module at interpreter start (installed top-level as
``_lm_eval_ext_autoload`` so that start-up does not import the ``lm_eval_ext`` package).
It only installs a ``sys.meta_path`` finder (no lm_eval or torch import happens here). When
an lm-eval module named in :data:`INSTALLS` finishes importing, the installs listed for it run:
``hf-metered`` is registered, every ``TaskManager`` also indexes the package's task folders, ...;
in the ``lm_eval`` command, a run of our tasks alone skips lm-eval's own task index.

Set ``LM_EVAL_EXT_DISABLE=1`` to turn the hook off; ``lm-eval-ext run ...`` still works.
"""

from __future__ import annotations

import _signal
import importlib
import os
import sys
from types import ModuleType

DISABLE_ENV = "LM_EVAL_EXT_DISABLE"

#: every install the hook makes, in order: (the lm-eval module whose import runs it, the
#: install: ``module:function`` of ``lm_eval_ext.plugin``, no arguments, idempotent)
INSTALLS: tuple[tuple[str, str], ...] = (
    ("lm_eval._cli", "lm_eval_cli:install_one_line_errors"),
    ("lm_eval._cli", "lm_eval_cli:check_stock_arguments"),
    ("lm_eval.models", "registration:register_models"),
    ("lm_eval.tasks.manager", "task_folders:add_task_folders"),
    ("lm_eval.tasks.manager", "upstream_noise:drop_metadata_hint"),
    ("lm_eval.tasks.manager", "lm_eval_cli:check_stock_command_line"),
    ("lm_eval.loggers.evaluation_tracker", "registration:name_embedded_runs"),
    ("lm_eval.loggers.evaluation_tracker", "saved_outputs:check_saved_results"),
    ("lm_eval.loggers.evaluation_tracker", "saved_outputs:check_saved_samples"),
    ("lm_eval.evaluator", "upstream_noise:quiet_git_hash"),
    ("lm_eval.evaluator", "lm_eval_cli:check_stock_user_tasks"),
    ("lm_eval.models.vllm_causallms", "vllm_engines:hand_over_kept_engines"),
)
#: installs that run as an lm-eval module starts importing, before its own imports: the
#: stock command's one-line errors and Ctrl-C cover ``import lm_eval`` itself
BEFORE: tuple[tuple[str, str], ...] = (
    ("lm_eval", "lm_eval_cli:start_stock_command"),
)
#: the lm-eval modules whose import runs installs, in the order they are first listed
TRIGGERS = tuple(dict.fromkeys(trigger for trigger, _ in (*BEFORE, *INSTALLS)))


def run_installs(module_name: str, installs: tuple[tuple[str, str], ...] = INSTALLS) -> None:
    """The ``installs`` listed for ``module_name``, in order."""
    for trigger, install in installs:
        if trigger == module_name:
            name, _, function = install.partition(":")
            getattr(importlib.import_module(f"lm_eval_ext.plugin.{name}"), function)()


def _run_safely(module_name: str, installs: tuple[tuple[str, str], ...]) -> None:
    try:
        run_installs(module_name, installs)
    except Exception as exc:  # never break lm_eval itself
        sys.stderr.write(
            f"lm-eval-ext: autoload hook for {module_name} failed ({exc!r}); "
            "use `lm-eval-ext run ...` instead, or set LM_EVAL_EXT_DISABLE=1.\n"
        )


class _HookedLoader:
    """Delegating loader that runs the module's installs right after it executes.

    A plain class: the import system needs only the methods (``importlib.abc`` would cost
    every interpreter start about 80 ms, and widen the window in which Ctrl-C breaks it).
    """

    def __init__(self, loader) -> None:  # any loader with exec_module
        self._loader = loader

    def create_module(self, spec):  # noqa: D102
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:  # noqa: D102
        self._loader.exec_module(module)
        _run_safely(module.__name__, INSTALLS)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


#: the packages whose first import starts each command (``import lm_eval`` for the stock
#: ``lm_eval``, ``import lm_eval_ext`` for ``lm-eval-ext``), and the names it is run by
COMMANDS = {"lm_eval": ("lm_eval", "lm-eval"), "lm_eval_ext": ("lm-eval-ext",)}


def _command_starting(package: str) -> str | None:
    """The command (``lm_eval``, ``lm-eval-ext``) that importing ``package`` starts, if any.

    As :func:`lm_eval_ext.errors.stock_lm_eval_command`, read before the package is imported.
    """
    program = sys.argv[0] if getattr(sys, "argv", None) else ""
    name = os.path.basename(program)
    if name in COMMANDS.get(package, ()):
        return name
    if package == "lm_eval" and program.endswith(os.path.join("lm_eval", "__main__.py")):
        return "lm_eval"
    return None


def _interrupted_early(signum, frame) -> None:
    """Ctrl-C as a command starts, before its one-line handling: one line, exit 130.

    Nothing has run, nothing is open; nothing is imported here (a module may be half-imported
    at this moment).
    """
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    command = _command_starting("lm_eval") or _command_starting("lm_eval_ext") or "python"
    os.write(2, f"\n{command}: interrupted (Ctrl-C) while starting: nothing ran; run the "
                "command again\n".encode())
    os._exit(130)


#: :func:`lm_eval_ext.errors.interrupt_once` replaces this handler as Python's own
_interrupted_early.lm_eval_ext_early = True


def _catch_early_interrupts(package: str) -> None:
    """As a command's package starts importing (main thread, Python's handler): ours, at once.

    Through ``_signal``, the module ``signal`` wraps: ``import signal`` imports ``enum``
    (about 18 ms), the very window this closes.
    """
    if _command_starting(package) is None or _signal.getsignal(_signal.SIGINT) is not \
            _signal.default_int_handler:
        return
    try:
        _signal.signal(_signal.SIGINT, _interrupted_early)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGINT])  # an inherited block
    except ValueError:  # not the main thread: Python's handler stays
        pass


class PostImportFinder:
    """Meta-path finder that wraps the loaders of the modules :data:`INSTALLS` names."""

    def find_spec(self, fullname, path, target=None):  # noqa: D102
        if fullname in COMMANDS:
            _catch_early_interrupts(fullname)
        if fullname not in TRIGGERS:
            return None
        _run_safely(fullname, BEFORE)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader)
                return spec
        return None


#: the models this package registers (the stock ``lm_eval`` lacks them with the hook off)
OUR_MODELS = ("hf-metered", "vllm-metered", "hf-multimodal-metered")


def _stock_command_model() -> str | None:
    """The ``--model`` of a stock ``lm_eval`` command line (None: another program, or none)."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if os.path.basename(sys.argv[0] if sys.argv else "") not in ("lm_eval", "lm-eval") and \
            argv[1:3] != ["-m", "lm_eval"]:
        return None
    for i, arg in enumerate(argv):
        if arg in ("--model", "-m") and i + 1 < len(argv) and argv[i + 1] != "lm_eval":
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.partition("=")[2]
    return None


def _refuse_our_model_while_disabled() -> None:
    """With the hook off, the stock ``lm_eval`` asked for our model: one line, exit 2.

    (lm-eval would end in its "Tasks not found" or model-registry traceback.)
    """
    model = _stock_command_model()
    if model in OUR_MODELS:
        sys.stderr.write(f"lm_eval: error: --model {model} is lm-eval-ext's, and {DISABLE_ENV}="
                         f"{os.environ[DISABLE_ENV]} turns lm-eval-ext off in the stock lm_eval: "
                         f"unset {DISABLE_ENV}, or run `lm-eval-ext run ...` instead\n")
        sys.stderr.flush()
        os._exit(2)  # in a .pth line: SystemExit would stop Python's start-up with a traceback


def install() -> None:
    """Install the finder once, unless ``LM_EVAL_EXT_DISABLE`` is set to a true value."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        _refuse_our_model_while_disabled()
        return
    if any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, PostImportFinder())
    # Modules imported before this hook (rare: only if something imported lm_eval from a
    # .pth file that sorts earlier) get their installs directly.
    for name in TRIGGERS:
        if name in sys.modules:
            run_installs(name, BEFORE)
            run_installs(name)


try:
    install()
except Exception as _exc:  # a broken hook must never break Python start-up
    sys.stderr.write(f"lm-eval-ext: autoload disabled ({_exc!r})\n")
