#!/bin/bash
echo "sqlite-with-gcov" > /app/answer.txt
