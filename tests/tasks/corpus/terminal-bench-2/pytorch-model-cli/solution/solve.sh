#!/bin/bash
echo "pytorch-model-cli" > /app/answer.txt
