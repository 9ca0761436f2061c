#!/usr/bin/env bash
# Issue 42 on the CPU: where the CPU headline's wall time goes. The headline as typed once
# under /usr/bin/time and once under cProfile (benchmarks/_startup.sh), and the imports under
# python -X importtime; run on a quiet machine (the time file records its CPU share).
#
#   bash benchmarks/cpu_startup_profile.sh OUT_DIR
set -euo pipefail
OUT=${1:?output folder}; RUNS=$(mktemp -d)
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 LM_EVAL_EXT_DATA=${LM_EVAL_EXT_DATA:-../shared/data}
. benchmarks/_startup.sh
timed_and_profiled "$OUT" cpu_headline lm_eval --model hf-metered --tasks bbq_subset_25pct
python3 -X importtime -c "import lm_eval_ext.backends.hf.metered" 2> "$RUNS/imports.txt"
python3 benchmarks/profile_summary.py "$RUNS/imports.txt" --importtime --out "$OUT/cpu_import_profile.json" \
  --command 'python -X importtime -c "import lm_eval_ext.backends.hf.metered" (benchmarks/cpu_startup_profile.sh)'
