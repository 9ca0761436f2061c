#!/usr/bin/env bash
# The paper-stress-test block of the embedded model on the H200 (issue 9), as campaigns.
#
#   bash benchmarks/h200_campaign.sh start      # one worker per visible GPU, in the background
#   bash benchmarks/h200_campaign.sh snapshot   # progress, and the campaign folders into $OUT
#   bash benchmarks/h200_campaign.sh skeleton DIR   # here: DIR's identity + finished-cell records
#                                               # into .campaign/ (carry it: start resumes)
#
# Workers run the same campaign commands; they share the cells through the campaign folder's
# locks (each cell runs once, on one GPU, with that GPU metered alone). Both campaigns run
# with --no-analyze; the analysis runs where the folders land, with the same commands.
set -euo pipefail
ROOT=${CAMPAIGN_ROOT:-/tmp/camp}
LOGLIK="python -m lm_eval_ext.cli.main campaign --preset paper-stress-test --path loglik --large-batch 32 --out $ROOT/loglik --no-analyze --quiet"
GEN="python -m lm_eval_ext.cli.main campaign benchmarks/campaigns/paper_generative_m0_m1.yaml --out $ROOT/gen --no-analyze --quiet"
case "${1:-}" in
  skeleton)  # runs here, on the campaign folders fetched from an earlier session
    src=${2:?usage: $0 skeleton DIR}; mkdir -p .campaign
    (cd "$src" && tar -czf "$OLDPWD/.campaign/skeleton.tgz" */campaign.json \
      */campaign.yaml */cells/*/cell.json)
    ls -la .campaign ;;
  start)
    mkdir -p "$ROOT"
    # resume: finished cells are known by their cell.json alone, so they are skipped
    [ -f .campaign/skeleton.tgz ] && tar -C "$ROOT" -xzf .campaign/skeleton.tgz
    n=$(nvidia-smi -L | wc -l)
    for ((g = 0; g < n; g++)); do
      CUDA_VISIBLE_DEVICES=$g PYTHONUNBUFFERED=1 setsid nohup bash -c "$LOGLIK; $GEN" \
        > "$ROOT/worker$g.log" 2>&1 < /dev/null &
      sleep 15  # the first worker creates the folders and loads first
    done
    echo "started $n workers; logs: $ROOT/worker*.log" ;;
  snapshot)
    for log in "$ROOT"/worker*.log; do echo "== $log"; grep -E "^\[campaign|campaign:|Error|error" "$log" | tail -4; done
    for c in loglik gen; do
      # exit 1 = a file changed while read (a cell in flight): the snapshot is still usable
      [ -d "$ROOT/$c" ] && { tar -C "$ROOT" -czf "$OUT/$c.tgz" --exclude="*.lock" "$c" || [ $? -eq 1 ]; }
    done
    cp "$ROOT"/worker*.log "$OUT/" 2>/dev/null || true
    ls -la "$OUT" ;;
  *) echo "usage: $0 start|snapshot|skeleton DIR" >&2; exit 2 ;;
esac
