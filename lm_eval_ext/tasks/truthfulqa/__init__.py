"""TruthfulQA tasks: MC1/MC2 by log-likelihood and MC1 as a free-form lettered choice."""
