#!/usr/bin/env bash
# XSTest through lm-eval and Inspect AI (our xstest_ext task), the first N prompts, on the CPU,
# then `lm-eval-ext analyze --compare-harness` (HELM's xstest needs the hub and a judge).
#
#   bash benchmarks/cross_harness_xstest_cpu.sh OUT        # N_ITEMS=20 by default
set -euo pipefail
OUT=$(realpath -m "${1:?usage: $0 OUT}"); N=${N_ITEMS:-20}
export LM_EVAL_EXT_DATA=$(realpath "${LM_EVAL_EXT_DATA:-../shared/data}")
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
. .venv/bin/activate
CK=$(python -c "from lm_eval_ext.backends.embedded_model import ensure_checkpoint; print(ensure_checkpoint())")
mkdir -p "$OUT"
lm-eval-ext run --model hf-metered --model_args idle_seconds=0 --tasks xstest_ext --limit "$N" \
  --output_path "$OUT/lm_eval" --log_samples > "$OUT/lm_eval.log" 2>&1
inspect eval lm_eval_ext/xstest_ext --limit "$N" --model hf/local -M "model_path=$CK" -M device=cpu \
  -M do_sample=false --display plain --log-dir "$OUT/inspect" > "$OUT/inspect.log" 2>&1
lm-eval-ext analyze --compare-harness "lm_eval=$OUT/lm_eval" "inspect=$(ls "$OUT"/inspect/*.eval)" \
  --out "$OUT/compare" --overwrite
