"""BBQ-V: image-grounded BBQ, generative only (lm-eval passes images to generation only)."""
