"""Benchmark data: pinned upstream files, verification, preparation and frozen subsets.

Data is found through ``LM_EVAL_EXT_DATA=<folder>`` (a folder with one sub-folder per
benchmark in the upstream layout, e.g. ``../shared/data``); without it, the pinned upstream
files are downloaded once into the cache. See :mod:`lm_eval_ext.data.store`.
"""
