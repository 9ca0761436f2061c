"""lm-eval-ext: conclusion-stable, energy-metered responsible-AI evaluation for lm-eval.

Data flows one way, lowest layer first (``tests/test_layers.py`` enforces it):

* ``data``: finds, verifies (SHA-256) and prepares the upstream benchmark files.
* ``tasks``: lm-eval task folders (BBQ and its frozen subsets, BBQ-V, TruthfulQA, ToxiGen,
  CrowS-Pairs, XSTest), both scoring paths and the template tiers.
* ``generation``: greedy decoding through transformers' and torch's public APIs (the fast path).
* ``metering``: energy per task and request type, backend-independent (``Metering``,
  ``MeteredLM``).
* ``backends``: the lm-eval models, ``hf/`` (``hf-metered``, ``hf-multimodal-metered``) and
  ``vllm/`` (``vllm-metered``), with what they share (precision, chat template, model args, the
  embedded and packaged models).
* ``command_preflight``: an lm-eval command line checked before any model loads.
* ``plugin``: how the package plugs into lm-eval and its stock ``lm_eval`` command (models,
  task folders, the start-up hook): every write into lm-eval, each listed in its docstring.
* ``analysis``: lm-eval output -> per-item frame -> paired deltas, power, rank flips,
  ``recommend``; its ``stats`` sub-package holds the statistics (no I/O).
* ``cross_harness``, ``export``, ``judge``: Inspect AI / HELM comparison, upstream task folders,
  LLM judges.
* ``campaign``: campaigns, grids and group-sequential evaluation.
* ``cli``: the ``lm-eval-ext`` command.

This module is imported at every interpreter start by the ``.pth`` autoload hook, so it
must stay free of heavy imports.
"""

__version__ = "0.1.0"
