"""LLM judges of generated reasoning: two rubrics, a strict reply parser, a judging pass."""
