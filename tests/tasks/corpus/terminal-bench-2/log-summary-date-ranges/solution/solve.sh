#!/bin/bash
echo "log-summary-date-ranges" > /app/answer.txt
