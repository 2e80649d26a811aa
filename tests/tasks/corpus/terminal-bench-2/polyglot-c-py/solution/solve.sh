#!/bin/bash
echo "polyglot-c-py" > /app/answer.txt
