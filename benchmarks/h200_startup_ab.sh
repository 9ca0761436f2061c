#!/usr/bin/env bash
# Issue 42 on one H200 (after ../shared/gpu/stage.sh): the headline as typed, an earlier tree
# and this one alternated (benchmarks/headline_ab.sh), after compiling the installed sources to
# bytecode as a pip install does; then this tree under cProfile (benchmarks/profile_summary.py).
#
#   mkdir -p .gpu_previous && git archive COMMIT lm_eval_ext | tar -x -C .gpu_previous \
#     && echo COMMIT > .gpu_previous/COMMIT                       # here (.gpu_previous: ignored)
#   CURRENT_COMMIT=$(git rev-parse HEAD) bash benchmarks/h200_startup_ab.sh .gpu_previous 3
set -euo pipefail
: "${OUT:?set OUT}"
OLD=${1:?an exported earlier tree}; ROUNDS=${2:-3}
. benchmarks/_startup.sh
nvidia-smi -L > "$OUT/gpu.txt"
as_installed "$OLD"
rm -rf /tmp/ab  # a folder of an earlier call would hold two runs per side and round
bash benchmarks/headline_ab.sh "$OLD" /tmp/ab "$ROUNDS" | tee "$OUT/ab.txt"
python3 benchmarks/headline_ab.py /tmp/ab --out "$OUT/headline_ab.json"
python3 -m cProfile -o /tmp/h.prof "$(command -v lm_eval)" --model hf-metered \
  --tasks bbq_subset_25pct --output_path /tmp/h_prof > "$OUT/profile.log" 2>&1 || true
python3 benchmarks/profile_summary.py /tmp/h.prof --out "$OUT/headline_profile.json" \
  --command "python3 -m cProfile -o h.prof \$(command -v lm_eval) --model hf-metered --tasks bbq_subset_25pct (benchmarks/h200_startup_ab.sh, after compileall)"
