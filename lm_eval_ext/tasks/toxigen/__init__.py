"""ToxiGen tasks: classify human-annotated statements as hateful or not (both scoring paths)."""
