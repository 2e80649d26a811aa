#!/bin/sh
# Writes 1 when the task is solved, 0 otherwise.
app="${APP_DIR:-/app}"
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
if grep -q "\"name\": *\"ray-bench\"" "$app/config.json" 2>/dev/null && grep -q "\"replicas\": *3" "$app/config.json"; then echo 1 > "$out/reward.txt"; else echo 0 > "$out/reward.txt"; fi
