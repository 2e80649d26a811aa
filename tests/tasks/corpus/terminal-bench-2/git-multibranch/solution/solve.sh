#!/bin/bash
echo "git-multibranch" > /app/answer.txt
