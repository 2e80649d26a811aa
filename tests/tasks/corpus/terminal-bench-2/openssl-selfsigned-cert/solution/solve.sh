#!/bin/bash
echo "openssl-selfsigned-cert" > /app/answer.txt
