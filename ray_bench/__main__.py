"""``python -m ray_bench``: the ``ray-bench`` command, for an interpreter whose venv has no
``bin/ray-bench`` on the path (or whose entry script points at a venv that moved)."""

from ray_bench.cli import main

main()
