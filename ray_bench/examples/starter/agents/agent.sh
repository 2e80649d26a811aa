#!/bin/sh
# A scripted stand-in for a coding agent, to replace with a real one (docs/agents.md). It checks
# that its account's key reached it, reads the instruction, and when AGENT_USE_SOLUTION=1 runs
# the task's reference solution. It calls no model, so its usage is zero.
set -u
logs="${LOGS_DIR:-/logs}/agent"
mkdir -p "$logs"
if [ -z "${AGENT_API_KEY:-}" ]; then
  echo '{"type": "auth", "message": "AGENT_API_KEY is not set: see the route in accounts.yaml"}' > "$logs/error.json"
  exit 3
fi
echo "read $(wc -c < "${INSTRUCTION_FILE:-/task/instruction.md}") bytes of instruction"
if [ "${AGENT_USE_SOLUTION:-0}" = 1 ]; then
  (cd "${APP_DIR:-/app}" && sh "${SOLUTION_DIR:-/solution}/solve.sh") && echo "ran the reference solution"
fi
echo '{"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}' > "$logs/usage.json"
