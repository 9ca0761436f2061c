#!/bin/bash
# One evaluation over several GPUs of one node, data parallel (a model copy per GPU), metered:
# every rank meters its own GPU; rank 0's config.metering holds the sum over ranks, the
# slowest rank's time, config.metering.data_parallel.per_rank, and lm-eval's padding
# requests counted apart (answered without running the model).
#   bash data_parallel_cell.sh 2 bbq_instrument_loglik runs/dp
set -euo pipefail
GPUS=${1:-2}; TASKS=${2:-bbq_instrument_loglik}; OUT=${3:-runs/dp}
accelerate launch --num_processes "$GPUS" --multi_gpu -m lm_eval \
  --model hf-metered --model_args precision=bf16 --batch_size 32 \
  --tasks "$TASKS" --output_path "$OUT" --log_samples
