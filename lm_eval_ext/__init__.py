"""lm-eval-ext: conclusion-stable, energy-metered responsible-AI evaluation for lm-eval.

The package has three parts, each in one sub-package:

* ``lm_eval_ext.tasks``: lm-eval task YAMLs (BBQ and frozen subsets, ...).
* ``lm_eval_ext.model_wrappers``: the ``hf-metered`` lm-eval model.
* ``lm_eval_ext.analysis``: did the conclusion change?

``lm_eval_ext.data`` finds, verifies and prepares the upstream benchmark files.

This module is imported at every interpreter start by the ``.pth`` autoload hook, so it
must stay free of heavy imports.
"""

__version__ = "0.1.0"
