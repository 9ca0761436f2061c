"""The ``lm-eval-ext`` command line: one module per command, each ``add_parser`` + ``run``."""
