#!/bin/bash
# Submit a campaign to SLURM: a job array of shards, then the finishing job after it.
#   CAMPAIGN=campaign.yaml OUT=runs/study SHARDS=4 bash examples/slurm/submit.sh
# Resources come from the environment (defaults in brackets), passed to sbatch on its command
# line, so they override the #SBATCH lines of the two scripts:
#   LM_EVAL_EXT_GRES [gpu:1]     generic resources per array task ("" for none: a CPU cluster)
#   LM_EVAL_EXT_CPUS [8]         CPUs per array task
#   LM_EVAL_EXT_TIME [04:00:00]  time limit per array task
#   LM_EVAL_EXT_FINISH_CPUS [4]  CPUs of the finishing job (status check and analysis)
#   LM_EVAL_EXT_PARTITION []     partition of both jobs (empty: the cluster's default)
# Prints the two job ids; resubmitting with the same CAMPAIGN and OUT skips finished cells.
set -euo pipefail
: "${CAMPAIGN:?set CAMPAIGN=path/to/campaign.yaml}" "${OUT:?set OUT=campaign folder}"
here=$(cd "$(dirname "$0")" && pwd)
common=(--parsable --export="ALL,CAMPAIGN=$CAMPAIGN,OUT=$OUT")
[ -n "${LM_EVAL_EXT_PARTITION:-}" ] && common+=(--partition="$LM_EVAL_EXT_PARTITION")
array=(--array="1-${SHARDS:-1}" --cpus-per-task="${LM_EVAL_EXT_CPUS:-8}"
       --time="${LM_EVAL_EXT_TIME:-04:00:00}")
gres=${LM_EVAL_EXT_GRES-gpu:1}
[ -n "$gres" ] && array+=(--gres="$gres")
job=$(sbatch "${common[@]}" "${array[@]}" "$here/campaign_array.sbatch")
job=${job%%;*}
finish=$(sbatch "${common[@]}" --dependency="afterany:$job" \
  --cpus-per-task="${LM_EVAL_EXT_FINISH_CPUS:-4}" "$here/campaign_finish.sbatch")
echo "array ${job} (${SHARDS:-1} shards), finishing job ${finish%%;*}"
