#!/bin/sh
set -e
echo 'Hello, world!' > hello.txt
