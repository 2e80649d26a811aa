#!/bin/sh
mkdir -p /logs/verifier; if grep -qx "$EXPECTED" /tmp/answer.txt && grep -qx hello /tmp/greeting.txt && test -z "$ANSWER"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
