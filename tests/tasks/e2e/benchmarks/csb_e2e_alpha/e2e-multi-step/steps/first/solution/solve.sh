#!/bin/sh
echo one > /app/answer.txt
