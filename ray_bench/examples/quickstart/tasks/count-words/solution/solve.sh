#!/bin/sh
set -e
echo 9 > count.txt
