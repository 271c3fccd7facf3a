#!/usr/bin/env bash
# compute-sanitizer memcheck of experiment scripts, in parallel on one GPU (correctness only: run
# no timing beside it). Waits on the runs' own pids: a `pgrep -f compute-sanitizer` loop also
# matches the device command's shell, whose line names compute-sanitizer, and never ends (it
# spent a whole 600 s command, 2026-11-28). Logs: $OUT/memcheck-<script name>.txt; each run's
# summary line (or that it stopped at MEMCHECK_TIMEOUT) on stdout.
# Usage (repository root, after gpu_env.sh): bash benchmarks/tools/memcheck.sh "script.py [args]"...
set -uo pipefail
pids=()
logs=()
for run in "$@"; do
  script=${run%% *}
  log="$OUT/memcheck-$(basename "$script" .py)${run#"$script"}.txt"
  log=${log// /_}
  timeout "${MEMCHECK_TIMEOUT:-240}" compute-sanitizer --tool memcheck python3 $run > "$log" 2>&1 &
  pids+=($!)
  logs+=("$log")
done
for i in "${!pids[@]}"; do
  wait "${pids[i]}"
  code=$?
  summary=$(grep "ERROR SUMMARY" "${logs[i]}" | tail -1)
  [ $code -eq 124 ] && summary="stopped at MEMCHECK_TIMEOUT ${MEMCHECK_TIMEOUT:-240} s, no summary"
  # a script that fails part-way still prints "0 errors" for what it ran: say so
  [ $code -ne 0 ] && [ $code -ne 124 ] && summary="${summary:+$summary; }the script FAILED (exit $code)"
  echo "$(basename "${logs[i]}"): ${summary:-no summary (exit $code)}"
done
