"""``python -m ray_bench`` is the ``ray-bench`` command."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_ray_bench_is_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "ray_bench", "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "quickstart" in done.stdout and "execute" in done.stdout
