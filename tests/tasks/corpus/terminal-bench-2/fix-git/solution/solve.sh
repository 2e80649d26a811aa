#!/bin/bash
echo "fix-git" > /app/answer.txt
