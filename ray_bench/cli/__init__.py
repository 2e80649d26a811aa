"""The ray-bench CLI."""

from ray_bench.cli import evidence as _evidence  # noqa: F401  (registers gaps, rerun, regrade)
from ray_bench.cli import export as _export  # noqa: F401  (export harbor, export inspect)
from ray_bench.cli import official as _official  # noqa: F401  (exclude, include, settle, promote)
from ray_bench.cli import ops as _ops  # noqa: F401  (registers accounts, simulate, watch)
from ray_bench.cli import start as _start  # noqa: F401  (init, image base)
from ray_bench.cli.app import app, main

__all__ = ["app", "main"]
