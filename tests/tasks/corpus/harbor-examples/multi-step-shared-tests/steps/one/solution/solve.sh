#!/bin/bash
echo "one" > /app/answer.txt
