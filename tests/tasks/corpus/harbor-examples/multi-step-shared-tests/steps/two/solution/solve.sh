#!/bin/bash
echo "two" > /app/answer.txt
