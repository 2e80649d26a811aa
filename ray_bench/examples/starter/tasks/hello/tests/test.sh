#!/bin/sh
# The verifier: writes 1 when the task is solved, 0 otherwise.
app="${APP_DIR:-/app}"
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
if [ "$(cat "$app/hello.txt" 2>/dev/null)" = "Hello, world!" ]; then echo 1; else echo 0; fi > "$out/reward.txt"
