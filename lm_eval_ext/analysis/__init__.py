"""Did the conclusion change? Paired comparisons of lm-eval runs (see the README)."""
