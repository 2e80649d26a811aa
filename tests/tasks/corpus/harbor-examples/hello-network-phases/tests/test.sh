#!/bin/bash
# Harbor verifier: write the reward where Harbor reads it.
mkdir -p /logs/verifier
if [ -f /app/answer.txt ] && grep -q "42" /app/answer.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
