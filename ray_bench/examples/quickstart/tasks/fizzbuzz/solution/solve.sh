#!/bin/sh
set -e
i=1; while [ $i -le 15 ]; do if [ $((i % 15)) -eq 0 ]; then echo FizzBuzz; elif [ $((i % 3)) -eq 0 ]; then echo Fizz; elif [ $((i % 5)) -eq 0 ]; then echo Buzz; else echo $i; fi; i=$((i+1)); done > fizz.txt
