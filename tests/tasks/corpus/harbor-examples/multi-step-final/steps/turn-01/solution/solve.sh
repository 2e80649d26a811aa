#!/bin/bash
echo "turn-01" > /app/answer.txt
