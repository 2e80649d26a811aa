#!/bin/sh
echo two > /app/seed.txt
