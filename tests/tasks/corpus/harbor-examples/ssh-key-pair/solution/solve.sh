#!/bin/bash
echo "ssh-rsa" > /app/answer.txt
