#!/bin/sh
mkdir -p /logs/verifier; if grep -qx 65534 /tmp/agent-uid.txt && test "$(id -u)" = 0 && ! grep -qvx lo /tmp/agent-net.txt && ls /sys/class/net | grep -qvx lo; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
