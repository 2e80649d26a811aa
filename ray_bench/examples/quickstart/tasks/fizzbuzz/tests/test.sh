#!/bin/sh
# Writes 1 when the task is solved, 0 otherwise.
app="${APP_DIR:-/app}"
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
if [ "$(sed -n 15p "$app/fizz.txt" 2>/dev/null)" = "FizzBuzz" ] && [ "$(sed -n 9p "$app/fizz.txt")" = "Fizz" ] && [ "$(wc -l < "$app/fizz.txt")" -eq 15 ]; then echo 1 > "$out/reward.txt"; else echo 0 > "$out/reward.txt"; fi
