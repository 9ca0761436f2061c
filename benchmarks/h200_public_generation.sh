#!/usr/bin/env bash
# Issue 40 on one H200 (after ../shared/gpu/stage.sh and its setup): the generation paths side
# by side in one process (generation_side_by_side.py), on the headline as typed (bf16) and on a
# random-init 8B at batch 64 and 1. The previous path's modules come from
# `python benchmarks/generation_side_by_side.py --export-previous add6719 .gpu_previous` (carried).
#
#   bash benchmarks/h200_public_generation.sh headline   # ~3 min
#   bash benchmarks/h200_public_generation.sh 8b         # ~6 min (newer8b: on 5.24, ~4 min)
#   bash benchmarks/h200_public_generation.sh newer      # the headline again on transformers
#       5.24 (wheels carried in .gpu_tf/: transformers 5.24.0, tokenizers 0.23.3), ~2 min
#   bash benchmarks/h200_public_generation.sh graphs     # the CUDA-graph decode against eager
#       steps (cuda_graphs=false): headline on 5.17 and 5.24, 8B at batch 64 and 1, ~6 min
set -euo pipefail
: "${OUT:?set OUT}"
SBS=(python3 benchmarks/generation_side_by_side.py)
[ -d .gpu_previous ] && SBS+=(--previous .gpu_previous)
stamp() { echo "== $(date +%T) $*"; }
# transformers 5.24 first on the path (its wheels carried in .gpu_tf/)
newer_transformers() {
  python3 -m pip install -q --no-deps --target /tmp/tf_new .gpu_tf/*.whl
  export PYTHONPATH=/tmp/tf_new:${PYTHONPATH:-}
}
nvidia-smi -L > "$OUT/gpu.txt"
case "${1:-}" in
  headline)
    stamp prepare; lm-eval-ext model prepare > "$OUT/prepare.log" 2>&1
    stamp "headline side by side"
    "${SBS[@]}" --rounds 3 --out "$OUT/side_by_side_headline.json"
    stamp done ;;
  8b|newer8b)  # newer8b: on transformers 5.24 (as `newer`), without the generate variant
    variants=public,previous,generate tag=""
    if [ "$1" = newer8b ]; then
      newer_transformers
      variants=public,previous tag=_tf524
    fi
    stamp "8B batch 64"
    "${SBS[@]}" --size llama-8b --limit 64 --batch-size 64 --rounds 3 \
      --variants $variants --out "$OUT/side_by_side_8b_b64$tag.json"
    stamp "8B batch 1"
    "${SBS[@]}" --size llama-8b --limit 6 --batch-size 1 --rounds 2 \
      --variants $variants --out "$OUT/side_by_side_8b_b1$tag.json"
    stamp done ;;
  newer)
    newer_transformers
    stamp "headline side by side, transformers 5.24"
    "${SBS[@]}" --rounds 3 \
      --variants public,previous,generate_static --out "$OUT/side_by_side_headline_tf524.json"
    stamp done ;;
  graphs)
    stamp prepare; lm-eval-ext model prepare > "$OUT/prepare.log" 2>&1
    stamp "headline, graphs against eager steps"
    "${SBS[@]}" --rounds 3 --variants public,eager --out "$OUT/graphs_headline.json"
    stamp "8B batch 64"
    "${SBS[@]}" --size llama-8b --limit 64 --batch-size 64 --rounds 3 --variants public,eager \
      --out "$OUT/graphs_8b_b64.json"
    stamp "8B batch 1"
    "${SBS[@]}" --size llama-8b --limit 6 --batch-size 1 --rounds 2 --variants public,eager \
      --out "$OUT/graphs_8b_b1.json"
    newer_transformers
    stamp "headline, transformers 5.24"
    "${SBS[@]}" --rounds 3 --variants public,eager --out "$OUT/graphs_headline_tf524.json"
    stamp done ;;
  *) echo "usage: $0 headline|8b|newer8b|newer|graphs" >&2; exit 2 ;;
esac
