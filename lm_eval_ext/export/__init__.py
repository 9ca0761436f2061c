"""Our tasks as self-contained lm-eval task folders (``lm-eval-ext export-upstream``)."""
