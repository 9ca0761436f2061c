#!/usr/bin/env bash
# The headline as typed (the CPU: fp32 on its cores; a GPU: the same command there), an
# earlier tree and this one alternated, whole command each, and the runs' folders for
# headline_ab.py (wall and inference seconds, texts identical to the earlier tree's).
#
#   git worktree add /tmp/old_tree add6719            # or: git archive C lm_eval_ext | tar -x
#   bash benchmarks/headline_ab.sh /tmp/old_tree OUT_DIR [ROUNDS] [CURRENT_LABEL]
#   python benchmarks/headline_ab.py OUT_DIR --out benchmarks/results/X.json
# The earlier tree's commit: its git HEAD, or a COMMIT file in it; this tree's: git HEAD, or
# $CURRENT_COMMIT where there is no git (a device).
set -uo pipefail
OLD=${1:?an earlier tree (git worktree or exported package)}; OUT=${2:?output folder}
ROUNDS=${3:-2}; CURRENT=${4:-current}
mkdir -p "$OUT"
printf 'previous\n%s\n' "$CURRENT" > "$OUT/sides.txt"
export HF_HUB_OFFLINE=1 LM_EVAL_EXT_DATA=${LM_EVAL_EXT_DATA:-../shared/data}
{ cat "$OLD/COMMIT" 2>/dev/null || git -C "$OLD" rev-parse HEAD; } > "$OUT/previous_commit"
echo "${CURRENT_COMMIT:-$(git rev-parse HEAD)}" \
  > "$OUT/${CURRENT}_commit"
for round in $(seq 1 "$ROUNDS"); do
  for side in previous "$CURRENT"; do
    if [ "$side" = previous ]; then path=$(cd "$OLD" && pwd)${PYTHONPATH:+:$PYTHONPATH}
    else path=${PYTHONPATH:-}; fi
    PYTHONPATH=$path /usr/bin/time -f "%e" -o "$OUT/${side}_$round.time" \
      lm_eval --model hf-metered --tasks bbq_subset_25pct --output_path "$OUT/${side}_$round" \
      --log_samples > "$OUT/${side}_$round.log" 2>&1
    echo "$side $round $(cat "$OUT/${side}_$round.time") s"
  done
done
