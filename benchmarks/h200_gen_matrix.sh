#!/usr/bin/env bash
# Issue 22's throughput matrix on one H200 (after ../shared/gpu/stage.sh and its setup), from the
# project root: gen_throughput.py per model, a warm-up, then 3 rotating rounds of every condition.
# Paths: lm-eval's standard loop, the fast path, transformers' `generate` (and its compiled static
# cache on the random-init shapes); batch 1, 32, auto and the largest the items allow. One part per
# device call (each under 10 minutes); every JSON is rewritten after each run, so a cut call keeps
# what it measured.
#
# Item counts are cut to what one session's device time affords (the standard loop at batch 1 and
# 32 is the slow part); the fast path's planned batches (auto) and batch 512 of the headline's 500
# items are in earlier files (benchmarks/results/README.md). Budgets (each part's own
# --budget-seconds; the warm-up is not cut; round 0 runs while a minute is left, a later round
# only if all of it fits, each condition at 1.3x its last run) come from the two 2026-12-02
# leases: the process start-up (imports, the embedded model's conversion on a fresh machine or
# the random-init checkpoint's build, loading) takes 35-100 s, the warm-up about one round. On
# the second lease the embedded part (budget 480) and `batch1 llama-8b` (330) stopped one to
# three runs short of their third round under the older rule (no run starts with under 60 s
# left); their budgets are now 540 and 420, with which a third lease ran both to 3 whole rounds
# (407 s and 279 s per call, the first with the setup).
#
#   bash benchmarks/h200_gen_matrix.sh embedded            # ~7 min: 200 items at 32, 30 at 1
#   bash benchmarks/h200_gen_matrix.sh batches llama-8b    # ~6 min: 64 items at 32, auto and 64
#   bash benchmarks/h200_gen_matrix.sh batches smollm2-1.7b 330   # ~4 min
#   bash benchmarks/h200_gen_matrix.sh batch1 llama-8b     # ~5 min: 4 items at batch 1
#   bash benchmarks/h200_gen_matrix.sh batch1 smollm2-1.7b # ~4 min
#   bash benchmarks/h200_gen_matrix.sh nf4                 # ~4 min: llama-8b in nf4, 64 items
set -euo pipefail
: "${OUT:?set OUT}"
cd "$(dirname "$0")"
nvidia-smi -L > "$OUT/gpu.txt"
gt() { python3 gen_throughput.py --device cuda --rounds 3 --warmup "$@"; }
case "${1:-}" in
  embedded) gt --warmup-items 8 --budget-seconds 540 \
               --conditions standard@32:200,fast@32:200,generate@32:200,standard@1:30,fast@1:30,generate@1:30 \
               --out "$OUT/gen_throughput_embedded.json" ;;
  batches) gt --size "$2" --limit 64 --budget-seconds "${3:-420}" \
              --conditions standard@32,fast@32,generate_static@32,generate@32,standard@auto,fast@auto,fast@64 \
              --out "$OUT/gen_throughput_${2}_batches.json" ;;
  batch1) gt --size "$2" --limit 4 --budget-seconds 420 \
             --conditions standard@1,fast@1,generate_static@1,generate@1 \
             --out "$OUT/gen_throughput_${2}_b1.json" ;;
  nf4) gt --size llama-8b --precision nf4 --limit 64 --budget-seconds 300 \
          --conditions fast@64,generate@64,fast@auto \
          --out "$OUT/gen_throughput_llama-8b_nf4.json" ;;
  *) echo "usage: $0 embedded|nf4|batches SIZE [BUDGET_S]|batch1 SIZE" >&2; exit 2 ;;
esac
