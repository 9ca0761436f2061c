"""Our benchmarks in other harnesses (Inspect AI) and in lm-eval's own upstream format.

Reading other harnesses' outputs lives in the analysis (``lm_eval_ext.analysis.harness``):
data flow stays one way, tasks -> outputs -> analysis.
"""
