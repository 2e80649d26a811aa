#!/bin/sh
mkdir -p /app/out
echo report > /app/out/report.md
echo scratch > /app/out/cache.tmp
echo notes > /app/notes.txt
