#!/bin/bash
echo "build-pmars" > /app/answer.txt
