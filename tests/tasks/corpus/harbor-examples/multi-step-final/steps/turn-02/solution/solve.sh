#!/bin/bash
echo "turn-02" > /app/answer.txt
