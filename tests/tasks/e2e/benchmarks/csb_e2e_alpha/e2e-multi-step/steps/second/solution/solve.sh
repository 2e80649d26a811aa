#!/bin/sh
cat /app/seed.txt > /app/answer.txt
