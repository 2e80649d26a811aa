#!/bin/sh
# Writes 1 when the task is solved, 0 otherwise.
app="${APP_DIR:-/app}"
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
if [ "$(cat "$app/count.txt" 2>/dev/null)" = "9" ]; then echo 1 > "$out/reward.txt"; else echo 0 > "$out/reward.txt"; fi
