#!/usr/bin/env bash
# The CPU headline as typed (fp32, 2 cores), an earlier tree and this one alternated, and a
# summary JSON (wall and inference seconds, texts identical to the earlier tree's).
#
#   git worktree add /tmp/old_tree add6719
#   bash benchmarks/cpu_headline_ab.sh /tmp/old_tree OUT_DIR [ROUNDS]
#   python benchmarks/cpu_headline_ab.py OUT_DIR --out benchmarks/results/X.json
set -uo pipefail
OLD=${1:?an earlier tree (git worktree)}; OUT=${2:?output folder}; ROUNDS=${3:-2}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 LM_EVAL_EXT_DATA=${LM_EVAL_EXT_DATA:-../shared/data}
git -C "$OLD" rev-parse HEAD > "$OUT/previous_commit"
git rev-parse HEAD > "$OUT/public_commit"
for round in $(seq 1 "$ROUNDS"); do
  for side in previous public; do
    if [ "$side" = previous ]; then path=$OLD; else path=; fi
    PYTHONPATH=$path /usr/bin/time -f "%e" -o "$OUT/${side}_$round.time" \
      lm_eval --model hf-metered --tasks bbq_subset_25pct --output_path "$OUT/${side}_$round" \
      --log_samples > "$OUT/${side}_$round.log" 2>&1
    echo "$side $round $(cat "$OUT/${side}_$round.time") s"
  done
done
