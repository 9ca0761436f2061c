#!/usr/bin/env bash
# The generative stress test on one GPU, as run for issue 61 (after ../shared/gpu/stage.sh and
# . /tmp/gpu/env.sh on the device). Writes into $OUT: gpu.txt, generative_stress.json (the
# estimates, every cell, the projections), run.log and campaign.tgz (the campaign folder, for the
# judge and the analysis afterwards: it holds benchmark text, never commit it).
# Per-condition limits (the device time of one session): M0 300 items, so that the M4 cells'
# items lie inside it and are derived; M4 50 (the 12.5% memberships 24); M1, M5a 50; M3 30;
# M2 and M5b 10 (int8 at batch 1).
# The campaign's --timeout starts after the estimates' calibration (137.6 s on the H100 of
# results/generative_2026-12-06/), so the outer limit can fire first and kill stress_test.py
# before it writes its summary. Then the same command runs once more without
# --estimate-calibration (done cells are skipped, the estimates kept): it writes the summary,
# running what cells remain for at most 45 s. OUTER + SUMMARY stays under the 600 s a device
# command may run; that invocation's wall is the only one in campaign_wall_seconds then.
set -u
W=/tmp/st
mkdir -p "$W"
nvidia-smi --query-gpu=uuid,name --format=csv > "$OUT/gpu.txt"
export TQDM_DISABLE=1
RUN=(python benchmarks/stress_test.py run --path generative --out-dir "$W/gen"
  --json "$W/generative_stress.json" --limit 50 --condition-limit M0=300
  --condition-limit 'M4_12p5pct*=24' --condition-limit M2=10 --condition-limit M5b=10
  --condition-limit M3=30 --label "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")
timeout "${OUTER:-480}" "${RUN[@]}" --estimate-calibration 2 --timeout "${CAMPAIGN:-380}" \
  > "$W/run.log" 2>&1
code=$?
echo "exit $code" >> "$W/run.log"
if [ "$code" = 124 ]; then  # the outer limit fired: the summary was not written
  timeout "${SUMMARY:-100}" "${RUN[@]}" --timeout 45 >> "$W/run.log" 2>&1
  echo "summary exit $?" >> "$W/run.log"
fi
cp "$W/generative_stress.json" "$W/run.log" "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/campaign.tgz" gen gen.yaml 2>/dev/null
tail -30 "$W/run.log"
