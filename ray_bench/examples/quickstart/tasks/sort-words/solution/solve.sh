#!/bin/sh
set -e
printf 'apple\nbanana\nfig\npear\n' > sorted.txt
