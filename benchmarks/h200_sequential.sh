#!/usr/bin/env bash
# Issue 12 on the H200s: bf16 vs nf4 and bf16 vs int8 on the BBQ instrument's nested subsets
# (log-likelihood, batch 32 in both arms), `lm-eval-ext sequential`, one comparison per GPU.
#
#   bash benchmarks/h200_sequential.sh start      # on the device, in the background
#   bash benchmarks/h200_sequential.sh snapshot   # progress, and the folders into $OUT
set -euo pipefail
ROOT=${SEQ_ROOT:-/tmp/seq}
case "${1:-}" in
  start)
    mkdir -p "$ROOT"
    python3 -m lm_eval_ext.cli.main model prepare > "$ROOT/prepare.log" 2>&1
    g=0
    for candidate in nf4 int8; do
      CUDA_VISIBLE_DEVICES=$((g % $(nvidia-smi -L | wc -l))) setsid nohup python3 -m lm_eval_ext.cli.main \
        sequential --reference-args precision=bf16 --candidate-args "precision=$candidate" \
        --reference-batch 32 --candidate-batch 32 --metric accuracy --margin 2 \
        --out "$ROOT/bf16_vs_$candidate" --quiet > "$ROOT/bf16_vs_$candidate.log" 2>&1 < /dev/null &
      g=$((g + 1))
    done
    echo started ;;
  snapshot)
    tail -n 3 "$ROOT"/*.log || true
    tar -C "$(dirname "$ROOT")" -czf "$OUT/seq.tgz" "$(basename "$ROOT")" || [ $? -eq 1 ]
    nvidia-smi -L > "$OUT/gpus.txt"; ls -la "$OUT" ;;
  *) echo "usage: $0 start|snapshot" >&2; exit 2 ;;
esac
