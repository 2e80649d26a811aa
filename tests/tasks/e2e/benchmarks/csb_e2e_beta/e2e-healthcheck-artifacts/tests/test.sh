#!/bin/sh
mkdir -p /logs/verifier; if test -f /app/out/report.md; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
