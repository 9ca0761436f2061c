#!/usr/bin/env bash
# Issue 22 on one H200 (after ../shared/gpu/stage.sh and its setup): the headline as typed,
# cold and again, one run under cProfile (where the process's time outside inference goes).
# Everything lands in $OUT. (Its decode A/B, static_decode_ab.py, was retired with the path it
# measured: commit add6719 has both.)
#
#   bash benchmarks/h200_fast_generation.sh headline   # ~4 min
#   bash benchmarks/h200_fast_generation.sh bytecode   # compile every package's sources to .pyc
#       first (as pip install does; the device's packages ship without), then the headline once
set -euo pipefail
: "${OUT:?set OUT}"
HEADLINE=(run --model hf-metered --tasks bbq_subset_25pct --log_samples)
stamp() { echo "== $(date +%T) $*"; }
case "${1:-}" in
  headline)
    nvidia-smi -L > "$OUT/gpu.txt"
    stamp prepare; lm-eval-ext model prepare > "$OUT/prepare.log" 2>&1
    for n in cold again; do
      stamp "headline $n"
      /usr/bin/time -v lm-eval-ext "${HEADLINE[@]}" --output_path "/tmp/h_$n" \
        > "$OUT/headline_$n.log" 2> "/tmp/h_$n.time"
      python3 benchmarks/summarize_run.py "/tmp/h_$n" --time-log "/tmp/h_$n.time" \
        --out "$OUT/headline_h200_$n.json"
    done
    stamp "headline under cProfile"
    python3 -m cProfile -o "$OUT/headline.prof" "$(command -v lm-eval-ext)" "${HEADLINE[@]}" \
      --output_path /tmp/h_prof > "$OUT/headline_prof.log" 2>&1
    stamp done ;;
  bytecode)
    nvidia-smi -L > "$OUT/gpu.txt"
    echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}" > "$OUT/bytecode.txt"
    stamp prepare; lm-eval-ext model prepare > "$OUT/prepare.log" 2>&1
    stamp compileall
    SITE=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
    python3 -m compileall -q -j 0 /tmp/site "$SITE" >> "$OUT/bytecode.txt" 2>&1 || true
    stamp "headline with bytecode"
    /usr/bin/time -v lm-eval-ext "${HEADLINE[@]}" --output_path /tmp/h_pyc \
      > "$OUT/headline_pyc.log" 2> /tmp/h_pyc.time
    python3 benchmarks/summarize_run.py /tmp/h_pyc --time-log /tmp/h_pyc.time \
      --out "$OUT/headline_h200_bytecode.json"
    stamp done ;;
  *) echo "usage: $0 headline|bytecode" >&2; exit 2 ;;
esac
