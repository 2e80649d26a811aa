#!/bin/sh
set -e
echo 40 > sum.txt
