"""lm-eval task folders shipped with lm-eval-ext (one folder per benchmark).

Each folder holds a ``_<benchmark>_*_yaml`` base config (no ``.yaml`` suffix, so lm-eval
never indexes it as a task), thin variant YAMLs, a ``utils.py`` and a ``README.md`` in
lm-eval's task-README format. Shared helpers (the answer parser) live in ``common/``.
"""
