"""lm-eval task folders shipped with lm-eval-ext (one folder per benchmark).

Each folder holds a ``_<benchmark>_*_yaml`` base config (no ``.yaml`` suffix, so lm-eval
never indexes it as a task), thin variant YAMLs, a ``utils.py`` and a ``README.md`` in
lm-eval's task-README format. Shared helpers (the answer parser) live in ``common/``.
"""

from collections.abc import Iterable
from typing import Any

#: the few-shot pool each task family draws its first k examples from (its ``utils.py`` builds
#: it), by task-name prefix: ``--num_fewshot`` above it is refused before the model loads
FEWSHOT_POOLS = {"bbq_v_ext": 2, "bbq_full": 22, "bbq_instrument": 22, "bbq_subset_": 22,
                 "toxigen_ext": 13, "truthfulqa_ext": 10, "crows_pairs_ext": 10,
                 "xstest_ext": 10}


def fewshot_pool_size(task: str) -> int | None:
    """The few-shot pool of one of our tasks (None for another task)."""
    return _by_prefix(FEWSHOT_POOLS.items(), task)


#: the benchmark of our task families, by task-name prefix (the longest prefix first): BBQ's
#: registered (``data fingerprint --register``), sequential and exported tasks start ``bbq_``
BENCHMARK_PREFIXES = (("bbq_v_ext", "bbq_v"), ("bbq_", "bbq"), ("toxigen_ext", "toxigen"),
                      ("truthfulqa_ext", "truthfulqa"), ("crows_pairs_ext", "crows_pairs"),
                      ("xstest_ext", "xstest"))


def benchmark_of_task(task: str) -> str | None:
    """The benchmark one of our tasks evaluates (None for another task: not known here)."""
    return _by_prefix(BENCHMARK_PREFIXES, task)


def _by_prefix(table: Iterable[tuple[str, Any]], task: str) -> Any:
    """The value of the first (prefix, value) of ``table`` whose prefix starts ``task``."""
    return next((value for prefix, value in table if task.startswith(prefix)), None)
