#!/usr/bin/env bash
# Issue 42 on the CPU: where the CPU headline's wall time goes. The headline as typed once
# under /usr/bin/time and once under cProfile (profile_summary.py), and the imports under
# python -X importtime; run on a quiet machine (the time file records its CPU share).
#
#   bash benchmarks/cpu_startup_profile.sh OUT_DIR
set -euo pipefail
OUT=${1:?output folder}; RUNS=$(mktemp -d)
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 LM_EVAL_EXT_DATA=${LM_EVAL_EXT_DATA:-../shared/data}
HEADLINE=(lm_eval --model hf-metered --tasks bbq_subset_25pct)
/usr/bin/time -v "${HEADLINE[@]}" --output_path "$RUNS/timed" > "$RUNS/timed.log" 2> "$RUNS/timed.time"
python benchmarks/summarize_run.py "$RUNS/timed" --time-log "$RUNS/timed.time" --out "$OUT/cpu_headline.json"
python -m cProfile -o "$RUNS/cpu.prof" "$(command -v lm_eval)" "${HEADLINE[@]:1}" \
  --output_path "$RUNS/prof" > "$RUNS/prof.log" 2>&1
python benchmarks/profile_summary.py "$RUNS/cpu.prof" --out "$OUT/cpu_headline_profile.json" \
  --command "python -m cProfile -o cpu.prof \$(command -v lm_eval) --model hf-metered --tasks bbq_subset_25pct (benchmarks/cpu_startup_profile.sh)"
python -X importtime -c "import lm_eval_ext.backends.hf.metered" 2> "$RUNS/imports.txt"
python benchmarks/profile_summary.py "$RUNS/imports.txt" --importtime --out "$OUT/cpu_import_profile.json" \
  --command 'python -X importtime -c "import lm_eval_ext.backends.hf.metered" (benchmarks/cpu_startup_profile.sh)'
