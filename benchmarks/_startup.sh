# Helpers the start-up scripts share; source it from the project root.
#   use_staged_site             the stock lm_eval command sees the staged packages (/tmp/site)
#   as_installed [DIR ...]      ... compiled to bytecode as a pip install does (timed into
#                               $OUT/compileall.time), the model prepared
#   timed_and_profiled OUT NAME lm_eval ARGS...
#                               one timed run (OUT/NAME.json) and one under cProfile
#                               (OUT/NAME_profile.json); their folders and logs in $RUNS

# The staging installs with --target, so the package's .pth (which registers hf-metered with
# the stock lm_eval command) is not processed: have Python process /tmp/site's.
use_staged_site() {
  echo "import site; site.addsitedir('/tmp/site')" \
    > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/tmp_site.pth"
}

# The lent image runs Python with PYTHONDONTWRITEBYTECODE=1 and ships its packages without
# bytecode, so every command would compile them again: compile once, as a pip install does
# (the image's site-packages, the staged ones and any DIR given), and prepare the model.
as_installed() {
  use_staged_site
  /usr/bin/time -f "%e" -o "${OUT:?set OUT}/compileall.time" python3 -m compileall -q -j 0 \
    /tmp/site /opt/torch/.venv/lib/python3.12/site-packages "$@" > /dev/null 2>&1 || true
  lm-eval-ext model prepare > /dev/null 2>&1
}

timed_and_profiled() {
  local out=$1 name=$2 command=("${@:3}")
  RUNS=${RUNS:-$(mktemp -d)}
  /usr/bin/time -v "${command[@]}" --output_path "$RUNS/${name}_timed" \
    > "$RUNS/${name}_timed.log" 2> "$RUNS/${name}_timed.time"
  python3 benchmarks/summarize_run.py "$RUNS/${name}_timed" --time-log "$RUNS/${name}_timed.time" \
    --out "$out/$name.json"
  python3 -m cProfile -o "$RUNS/$name.prof" "$(command -v "${command[0]}")" "${command[@]:1}" \
    --output_path "$RUNS/${name}_prof" > "$RUNS/${name}_prof.log" 2>&1 || true  # 3.12's
  # cProfile trips over lm-eval's results table after the run (SystemError): the profile is
  # written first
  python3 benchmarks/profile_summary.py "$RUNS/$name.prof" --out "$out/${name}_profile.json" \
    --command "python3 -m cProfile -o $name.prof \$(command -v ${command[0]}) ${command[*]:1} ($0)"
}
