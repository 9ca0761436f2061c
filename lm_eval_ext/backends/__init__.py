"""lm-eval model classes of lm-eval-ext (``hf-metered``) and the embedded default model."""
