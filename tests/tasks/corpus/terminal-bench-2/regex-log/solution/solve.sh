#!/bin/bash
echo "regex-log" > /app/answer.txt
