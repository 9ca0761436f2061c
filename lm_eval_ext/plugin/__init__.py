"""The plug-in: everything that writes into lm-eval or patches it, and nothing else does.

Written against lm-eval 0.4.13 (paths below are in its package). lm-eval 0.4.13 loads no
plug-ins, so a start-up hook (:mod:`.autoload`, shipped top-level as ``_lm_eval_ext_autoload``
with ``lm_eval_ext_autoload.pth``) makes the installs its ``INSTALLS`` lists when lm-eval's
modules are imported (those of ``BEFORE`` as one starts importing); ``lm-eval-ext run`` and
the Python API make them through :func:`.registration.activate`. Every replaced attribute goes through
:func:`.wrapping.wrap_once` (once, marked with the install's name).
``tests/test_plugin_boundary.py`` checks that no module outside this folder assigns an
attribute on an lm-eval object.

Each write, where it is made, and the upstream change that would retire it:

1. ``sys.meta_path``: a finder that runs the writes below right after ``lm_eval.models``,
   ``lm_eval.tasks.manager``, ``lm_eval.loggers.evaluation_tracker`` or ``lm_eval.evaluator``
   is imported (:mod:`.autoload`). Retired by lm-eval loading the ``lm_eval.models`` and
   ``lm_eval.tasks`` entry-point groups this package declares (proposed in lm-eval PR #4013 /
   #4015), and calling a plug-in's setup, before it parses its command line.
2. ``lm_eval.api.registry.model_registry.register(name, target="module:Class")`` for
   ``hf-metered``, ``hf-multimodal-metered``, ``vllm-metered`` (:func:`.registration.register_models`;
   the registry's public method). Retired by the ``lm_eval.models`` entry-point group.
3. ``lm_eval.tasks.TaskManager.__init__`` wrapped (:func:`.task_folders.add_task_folders`):
   our task folders added to ``include_path``; ``--metadata`` keys near a task setting's name
   refused; the task names checked and lm-eval's own index skipped when every task is ours.
   Retired by the ``lm_eval.tasks`` entry-point group plus an index that is built lazily.
4. ``lm_eval.loggers.evaluation_tracker.GeneralConfigTracker.log_experiment_args`` wrapped,
   setting the tracker's ``model_name`` and ``model_name_sanitized`` for a run of the embedded
   model (:func:`.registration.name_embedded_runs`; lm-eval names it ``random_name_id()``).
   Retired by lm-eval asking the model for its run name (e.g. a key of ``get_model_info()``).
5. ``EvaluationTracker.save_results_aggregated`` and ``save_results_samples`` wrapped to
   check the files written (:mod:`.saved_outputs`): lm-eval logs a warning on a failed save
   (``evaluation_tracker.py:312,418``) and exits 0. Retired when a failed save raises.
6. ``lm_eval.evaluator.get_git_commit_hash`` replaced (:func:`.upstream_noise.quiet_git_hash`):
   lm-eval's ``git describe`` prints git's error outside a checkout
   (``loggers/utils.py:93``). Retired when that call passes ``stderr=subprocess.DEVNULL``.
7. A filter on the ``lm_eval.api.task`` logger (:func:`.upstream_noise.drop_metadata_hint`;
   public ``logging``): the ``--metadata`` hint of ``api/task.py:862``, printed for every
   ``custom_dataset`` task. Retired when the hint is shown only for a function taking kwargs.
8. ``sys.excepthook`` and the SIGINT handler in the stock ``lm_eval`` command, as
   ``import lm_eval`` starts (:func:`.lm_eval_cli.start_stock_command`; elsewhere from the
   import of its CLI package, :func:`.lm_eval_cli.install_one_line_errors`): our usage
   errors and lm-eval's ``--log_samples`` rule as one line; a closed output pipe quiet,
   Ctrl-C one line. Retired
   when lm-eval's CLI reports a plug-in's usage errors (a ``ValueError``) without a traceback.
9. ``sys.argv`` before ``lm_eval.__main__.cli_evaluate()`` (:mod:`.lm_eval_cli`), which parses
   ``sys.argv[1:]``; in the stock command too, a ``--config`` file's ``batch_size`` added as
   the flag it stands for (:func:`lm_eval_ext.command_preflight.config_batch_size_typed`: as
   the file's int it is lm-eval's default 1, which the fast path reads as not typed). Retired
   when ``cli_evaluate`` takes an argument list and a model can tell a given batch size.
10. ``lm_eval.models.vllm_causallms.LLM`` wrapped (:func:`.vllm_engines.hand_over_kept_engines`):
    in a campaign worker, the engine a cell before built with the same arguments is returned
    instead of a second one (``VLLM.__init__`` builds its engine itself, line 154). Retired
    when ``VLLM`` takes a built engine, as ``HFLM`` takes a built model.

The rest reads lm-eval through its public API: checks of a command line before any model
loads (:mod:`lm_eval_ext.command_preflight`, :mod:`.task_names`,
:func:`.lm_eval_cli.check_stock_arguments` before lm-eval parses ``--seed`` and the samples rule,
:func:`.lm_eval_cli.check_stock_command_line`).
"""
