"""Export-only code of the upstream task folders (``lm-eval-ext export-upstream``).

Each module here becomes the tail of an exported ``utils.py``, after the vendored stdlib-only
modules it imports from; its ``from lm_eval_ext...`` imports are dropped there. Constants in
CAPITALS marked ``# filled at export`` are replaced with the exported task's values.
"""
