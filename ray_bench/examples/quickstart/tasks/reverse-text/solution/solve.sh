#!/bin/sh
set -e
echo desserts > reversed.txt
