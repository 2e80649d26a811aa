#!/bin/bash
mkdir -p /app/src
