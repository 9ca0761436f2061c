#!/usr/bin/env bash
# Issue 42 on one H200 (after ../shared/gpu/stage.sh with vLLM's requirements): where
# vllm-metered's headline as typed spends its wall time. Bytecode compiled as pip does; the
# headline once under /usr/bin/time (a cold vLLM compile cache), once under cProfile (the main
# process: imports, waiting for the engine's processes, lm-eval's work), and the imports under
# python -X importtime; vLLM's own timing lines of both runs.
#
#   bash benchmarks/vllm_startup_profile.sh
set -uo pipefail
: "${OUT:?set OUT}"
export HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
nvidia-smi -L > "$OUT/gpu.txt"
echo "import site; site.addsitedir('/tmp/site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/tmp_site.pth"
python3 -m compileall -q -j 16 /tmp/site /opt/torch/.venv/lib/python3.12/site-packages > /dev/null 2>&1
lm-eval-ext model prepare > /dev/null 2>&1
HEADLINE=(lm_eval --model vllm-metered --tasks bbq_subset_25pct)
/usr/bin/time -v "${HEADLINE[@]}" --output_path /tmp/v_timed > /tmp/v_timed.log 2> /tmp/v_timed.time
python3 benchmarks/summarize_run.py /tmp/v_timed --time-log /tmp/v_timed.time --out "$OUT/vllm_headline.json"
python3 -m cProfile -o /tmp/v.prof "$(command -v lm_eval)" "${HEADLINE[@]:1}" \
  --output_path /tmp/v_prof > /tmp/v_prof.log 2>&1
python3 benchmarks/profile_summary.py /tmp/v.prof --out "$OUT/vllm_headline_profile.json" \
  --command "python3 -m cProfile -o v.prof \$(command -v lm_eval) --model vllm-metered --tasks bbq_subset_25pct (benchmarks/vllm_startup_profile.sh; the compile cache of the timed run before)"
for f in /tmp/v_timed.time /tmp/v_timed.log /tmp/v_prof.log; do
  echo "== $(basename "$f")"; grep -hE "took|Elapsed|init engine" "$f" | grep -v "Initializing" \
    | sed -E 's/^.*(INFO|WARNING)/\1/'
done > "$OUT/vllm_timing_lines.txt"
