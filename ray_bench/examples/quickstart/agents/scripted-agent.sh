#!/bin/sh
# A scripted stand-in for a coding agent: reads the instruction, "works" a few seconds,
# solves the task with probability SCRIPTED_SKILL% (by running the reference solution),
# and writes its usage like a real agent would. Deterministic per attempt (RAY_BENCH_SEED).
set -u
logs="${LOGS_DIR:-/logs}/agent"
mkdir -p "$logs"
instruction=$(cat "${INSTRUCTION_FILE:-/task/instruction.md}")
[ -n "${DEMO_API_KEY:-}" ] || { echo '{"type":"auth","message":"no DEMO_API_KEY"}' > "$logs/error.json"; exit 3; }
coin=$((0x$(printf '%s' "${RAY_BENCH_SEED:-0}" | md5sum | cut -c1-6)))
roll=$((coin % 100))
min=${SCRIPTED_MIN_SEC:-1}; max=${SCRIPTED_MAX_SEC:-3}
span=$((max - min + 1)); [ "$span" -ge 1 ] || span=1
sleep $((min + coin / 100 % span))
echo "read $(printf '%s' "$instruction" | wc -c) bytes of instruction; tools=${SCRIPTED_TOOLS:-none}; roll=$roll"
if [ "$roll" -lt "${SCRIPTED_SKILL:-50}" ] && [ -f "${SOLUTION_DIR:-/solution}/solve.sh" ]; then
  (cd "${APP_DIR:-/app}" && sh "${SOLUTION_DIR:-/solution}/solve.sh") && echo "solved"
else
  echo "gave up"
fi
in_tokens=$(( $(printf '%s' "$instruction" | wc -c) / 4 + 900 ))
out_tokens=$(( 200 + roll * 7 ))
# One request id per attempt, as a provider would return it (settlement matches on it).
request="req_$(printf '%s' "${RAY_BENCH_SEED:-0}" | md5sum | cut -c1-24)"
printf '{"input_tokens": %d, "output_tokens": %d, "cost_usd": 0.0%02d, "request_ids": ["%s"]}\n' \
  "$in_tokens" "$out_tokens" $((roll % 50 + 10)) "$request" > "$logs/usage.json"
