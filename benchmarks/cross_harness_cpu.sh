#!/usr/bin/env bash
# One model (the embedded SmolLM2-135M-Instruct) through lm-eval, Inspect AI (our task and
# inspect_evals' bbq) and HELM on the same 100 BBQ items, on the CPU, offline; then
# `lm-eval-ext analyze --compare-harness`. HELM picks the items (its seeded test sample),
# the others run on exactly those (`lm-eval-ext data manifest`).
#
#   bash benchmarks/cross_harness_cpu.sh OUT      # needs .venv (with [inspect], inspect-evals)
#                                                  # and a HELM venv (HELM_VENV, see README)
set -euo pipefail
OUT=$(realpath -m "${1:?usage: $0 OUT}"); N=${N_ITEMS:-100}
HELM_VENV=$(realpath "${HELM_VENV:-../venv_helm}"); HELM_DIR="$OUT/helm"
export LM_EVAL_EXT_DATA=$(realpath "${LM_EVAL_EXT_DATA:-../shared/data}")
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
. .venv/bin/activate
CK=$(python -c "from lm_eval_ext.backends.embedded_model import ensure_checkpoint; print(ensure_checkpoint())")
mkdir -p "$OUT" "$HELM_DIR/benchmark_output/scenarios/bbq/data"
# HELM downloads BBQ to benchmark_output/scenarios/bbq/data/<Category> unless it is there
for f in "$LM_EVAL_EXT_DATA"/bbq/data/*.jsonl; do
  cp "$f" "$HELM_DIR/benchmark_output/scenarios/bbq/data/$(basename "$f" .jsonl)"; done
# HELM names a local model after its folder: huggingface/smollm2
ln -sfn "$CK" "$OUT/smollm2"
(cd "$HELM_DIR" && "$HELM_VENV/bin/helm-run" --run-entries "bbq:subject=all,model=huggingface/smollm2" \
  --enable-local-huggingface-models "$OUT/smollm2" --suite cmp --max-eval-instances "$N" -n 1 \
  > "$OUT/helm.log" 2>&1)
RUN=$(ls -d "$HELM_DIR"/benchmark_output/runs/cmp/bbq:*)
lm-eval-ext data manifest "helm=$RUN" --out "$OUT/items.csv"
LM_EVAL_EXT_CACHE="$OUT/cache" lm-eval-ext data fingerprint "$OUT/items.csv" --register bbq_cross_harness
mkdir -p "$OUT/cache"; ln -sfn "$(python -c 'from lm_eval_ext.paths import cache_dir; print(cache_dir())')/models" "$OUT/cache/models"
LM_EVAL_EXT_CACHE="$OUT/cache" lm-eval-ext run --model hf-metered --model_args idle_seconds=0 \
  --tasks bbq_cross_harness --output_path "$OUT/lm_eval" --log_samples > "$OUT/lm_eval.log" 2>&1
MODEL=(--model hf/local -M "model_path=$CK" -M device=cpu -M do_sample=false --display plain)
inspect eval lm_eval_ext/bbq_ext -T "manifest=$OUT/items.csv" "${MODEL[@]}" --log-dir "$OUT/inspect" > "$OUT/inspect.log" 2>&1
mkdir -p "$OUT/ie/bbq_dataset/bbq"; ln -sfn "$LM_EVAL_EXT_DATA/bbq/data" "$OUT/ie/bbq_dataset/bbq/data"
IDS=$(python -c "import csv,sys; print(','.join(f\"{r['category']}_{int(r['example_id']):05d}\" for r in csv.DictReader(open(sys.argv[1]))))" "$OUT/items.csv")
INSPECT_EVALS_CACHE_DIR="$OUT/ie" HF_HOME="$OUT/hf" inspect eval inspect_evals/bbq --sample-id "$IDS" \
  "${MODEL[@]}" --log-dir "$OUT/inspect_evals" > "$OUT/inspect_evals.log" 2>&1
lm-eval-ext analyze --compare-harness "lm_eval=$OUT/lm_eval" "inspect=$(ls "$OUT"/inspect/*.eval)" \
  "inspect:inspect_evals=$(ls "$OUT"/inspect_evals/*.eval)" "helm=$RUN" --out "$OUT/compare" --overwrite
