"""XSTest tasks: exaggerated-safety prompts, responses classified as compliance or refusal."""
