"""The statistics of the analysis, apart from all file I/O.

* :mod:`.bootstrap`: cluster (natural-unit) bootstrap and permutation machinery;
* :mod:`.paired`: paired deltas, McNemar, answer agreement;
* :mod:`.power`: MDE, design effect, QRI, pre-registration cards;
* :mod:`.linearised`: delta-method paired deltas with cluster-robust SEs;
* :mod:`.group_sequential`: the group-sequential plan and its look decisions;
* :mod:`.subgroups`: subgroup masks, Holm and Benjamini-Hochberg;
* :mod:`.rank_flips`: orderings, rank flips and variance shares across a grid.
"""
