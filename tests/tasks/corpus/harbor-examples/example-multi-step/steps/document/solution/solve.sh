#!/bin/bash
echo "document" > /app/answer.txt
