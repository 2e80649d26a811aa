"""Compose files written by Harbor itself, for the compose tests."""

from __future__ import annotations

#: What Harbor's Terminal-Bench mapper writes for main (harbor/mappers/terminal_bench.py
#: HARBOR_MAIN_SERVICE), here with the network_mode it could not fold into a Dockerfile.
MAPPER_MAIN = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${TEST_DIR}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
    network_mode: "none"
"""

