#!/bin/bash
echo "crack-7z-hash" > /app/answer.txt
