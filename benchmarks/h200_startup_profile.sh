#!/usr/bin/env bash
# Issue 42 on one H200 (after ../shared/gpu/stage.sh and its setup): where the headline's
# wall time goes. The headline as typed twice (cold, again) under /usr/bin/time, once under
# cProfile; stock `lm_eval --model hf` on the same task and checkpoint (batch 32) the same way.
# Summaries: benchmarks/summarize_run.py and benchmarks/profile_summary.py --phases.
#
#   bash benchmarks/h200_startup_profile.sh         # ~5 min
#   bash benchmarks/h200_startup_profile.sh stock   # stock lm_eval --model hf only
set -euo pipefail
: "${OUT:?set OUT}"
stamp() { echo "== $(date +%T) $*"; }
nvidia-smi -L > "$OUT/gpu.txt"
. benchmarks/_startup.sh
use_staged_site  # (no bytecode compiled: as measured on 2026-12-02)
lm-eval-ext model prepare > "$OUT/prepare.log" 2>&1
CKPT=$(python3 -c "from lm_eval_ext.backends.embedded_model import ensure_checkpoint; print(ensure_checkpoint())")
HEADLINE=(lm_eval --model hf-metered --tasks bbq_subset_25pct)
STOCK=(lm_eval --model hf --model_args "pretrained=$CKPT" --tasks bbq_subset_25pct --batch_size 32)
[ "${1:-}" = stock ] || for n in cold again; do
  stamp "headline $n"
  /usr/bin/time -v "${HEADLINE[@]}" --output_path "/tmp/h_$n" > "$OUT/headline_$n.log" 2> "/tmp/h_$n.time"
  python3 benchmarks/summarize_run.py "/tmp/h_$n" --time-log "/tmp/h_$n.time" --out "$OUT/headline_$n.json"
done
stamp "headline under cProfile"
[ "${1:-}" = stock ] || python3 -m cProfile -o "$OUT/headline.prof" "$(command -v lm_eval)" "${HEADLINE[@]:1}" \
  --output_path /tmp/h_prof > "$OUT/headline_prof.log" 2>&1 || true  # 3.12's cProfile trips
  # over lm-eval's results table after the run (SystemError): the profile is written first
stamp "stock hf"
/usr/bin/time -v "${STOCK[@]}" --output_path /tmp/s_run > "$OUT/stock_hf.log" 2> /tmp/s_run.time
cp /tmp/s_run.time "$OUT/stock_hf.time"
stamp "stock hf under cProfile"
python3 -m cProfile -o "$OUT/stock_hf.prof" "$(command -v lm_eval)" "${STOCK[@]:1}" \
  --output_path /tmp/s_prof > "$OUT/stock_hf_prof.log" 2>&1 || true
stamp done
