#!/usr/bin/env bash
# Issue 42 on one H200 (after ../shared/gpu/stage.sh with vLLM's requirements): where
# vllm-metered's headline as typed spends its wall time. Bytecode compiled as pip does; the
# headline once under /usr/bin/time (a cold vLLM compile cache) and once under cProfile (the
# main process: imports, waiting for the engine's processes, lm-eval's work; the compile cache
# of the timed run before) through benchmarks/_startup.sh; vLLM's own timing lines of both.
#
#   bash benchmarks/vllm_startup_profile.sh
set -uo pipefail
: "${OUT:?set OUT}"
export HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
. benchmarks/_startup.sh
nvidia-smi -L > "$OUT/gpu.txt"
as_installed
RUNS=$(mktemp -d)
timed_and_profiled "$OUT" vllm_headline lm_eval --model vllm-metered --tasks bbq_subset_25pct
for f in "$RUNS"/vllm_headline_timed.time "$RUNS"/vllm_headline_timed.log "$RUNS"/vllm_headline_prof.log; do
  echo "== $(basename "$f")"; grep -hE "took|Elapsed|init engine" "$f" | grep -v "Initializing" \
    | sed -E 's/^.*(INFO|WARNING)/\1/'
done > "$OUT/vllm_timing_lines.txt"
