#!/bin/sh
echo "$ANSWER" > /tmp/answer.txt
echo "$GREETING" > /tmp/greeting.txt
pwd > /logs/agent/pwd.txt
