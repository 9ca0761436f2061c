#!/usr/bin/env bash
# Issue 13 on two GPUs: the same BBQ instrument (50% subset, log-likelihood, bf16, batch 1) on
# one GPU, two GPUs data parallel (accelerate launch) and two GPUs model parallel
# (parallelize=True), each a metered lm-eval run with --log_samples.
#
#   bash benchmarks/h200_scale_out.sh run        # on the device (2 GPUs); writes $ROOT/{dp,mp,single}
#   bash benchmarks/h200_scale_out.sh snapshot   # the run folders and logs into $OUT
#   python benchmarks/scale_out.py DIR --out benchmarks/results/.../scale_out.json   # here
#
# Batch 1 makes every request's forward pass the same computation in all three layouts, so
# per-item answers can be compared exactly. max_memory_per_gpu=150MB makes accelerate split the
# 269 MB bf16 model over both GPUs (14 modules on GPU 0, 20 on GPU 1); without it, "auto"
# would place the whole model on GPU 0.
set -euo pipefail
ROOT=${SCALE_ROOT:-/tmp/scale}
TASK=${SCALE_TASK:-bbq_subset_50pct_loglik}
CELL=(-m lm_eval_ext.campaign.cell --model hf-metered --tasks "$TASK" --batch_size 1 --log_samples
      ${SCALE_LIMIT:+--limit "$SCALE_LIMIT"})  # SCALE_LIMIT: a smoke test only
timed() {  # NAME CMD...: the process wall time of one run, beside its folder
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" > "$ROOT/$name.log" 2>&1
  python3 -c "import json,sys; json.dump({'process_wall_seconds': float(sys.argv[2]) - float(sys.argv[1])}, open(sys.argv[3], 'w'))" \
    "$t0" "$(date +%s.%N)" "$ROOT/$name/wall.json"
}
case "${1:-}" in
  run)
    mkdir -p "$ROOT"/{dp,mp,single}
    python3 -m lm_eval_ext.cli.main model prepare > "$ROOT/prepare.log" 2>&1
    timed dp python3 -m accelerate.commands.launch --num_processes 2 --multi_gpu --num_machines 1 \
      --mixed_precision no --dynamo_backend no "${CELL[@]}" --model_args precision=bf16 \
      --output_path "$ROOT/dp"
    timed mp env CUDA_VISIBLE_DEVICES=0,1 python3 "${CELL[@]}" \
      --model_args precision=bf16,parallelize=True,max_memory_per_gpu=150MB --output_path "$ROOT/mp"
    timed single env CUDA_VISIBLE_DEVICES=0 python3 "${CELL[@]}" --model_args precision=bf16 \
      --output_path "$ROOT/single"
    nvidia-smi -L > "$ROOT/gpus.txt"
    echo "scale-out runs done" ;;
  snapshot)
    tail -3 "$ROOT"/*.log || true
    tar -C "$(dirname "$ROOT")" -czf "$OUT/scale.tgz" "$(basename "$ROOT")" || [ $? -eq 1 ]
    ls -la "$OUT" ;;
  *) echo "usage: $0 run|snapshot" >&2; exit 2 ;;
esac
