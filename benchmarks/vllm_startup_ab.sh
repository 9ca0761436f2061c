#!/usr/bin/env bash
# Issue 42 on one H200 (after ../shared/gpu/stage.sh with vLLM's requirements): vllm-metered's
# headline as typed, vLLM's default engine (torch.compile + CUDA graphs) against eager mode
# (enforce_eager=True), whole command each, alternated; then headline_ab.py's JSON.
#
#   CURRENT_COMMIT=$(git rev-parse HEAD) bash benchmarks/vllm_startup_ab.sh ROUNDS
set -uo pipefail
: "${OUT:?set OUT}"
ROUNDS=${1:-2}; RUNS=/tmp/vllm_ab
rm -rf "$RUNS"; mkdir -p "$RUNS"
export HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
printf 'default\neager\n' > "$RUNS/sides.txt"
for side in default eager; do
  echo "${CURRENT_COMMIT:-$(git rev-parse HEAD)}" \
    > "$RUNS/${side}_commit"
done
for round in $(seq 1 "$ROUNDS"); do
  for side in default eager; do
    extra=(); [ "$side" = eager ] && extra=(--model_args enforce_eager=True)
    /usr/bin/time -f "%e" -o "$RUNS/${side}_$round.time" lm_eval --model vllm-metered \
      --tasks bbq_subset_25pct "${extra[@]}" --output_path "$RUNS/${side}_$round" \
      --log_samples > "$RUNS/${side}_$round.log" 2>&1
    echo "$side $round $(cat "$RUNS/${side}_$round.time") s" | tee -a "$OUT/ab.txt"
  done
done
python3 benchmarks/headline_ab.py "$RUNS" --out "$OUT/vllm_startup_ab.json" \
  --command "bash benchmarks/vllm_startup_ab.sh $ROUNDS"
