"""Generation: greedy decoding through transformers' public APIs and lm-eval's requests around it."""
