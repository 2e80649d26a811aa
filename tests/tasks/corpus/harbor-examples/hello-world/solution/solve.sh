#!/bin/bash
echo "Hello, world!" > /app/answer.txt
