"""The ray-bench CLI."""

from ray_bench.cli.app import app, main

__all__ = ["app", "main"]
