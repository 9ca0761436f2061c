"""The ``lm-eval-ext`` command line."""
