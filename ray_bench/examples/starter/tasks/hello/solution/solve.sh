#!/bin/sh
# A reference solution, run in the working directory.
set -e
echo 'Hello, world!' > hello.txt
