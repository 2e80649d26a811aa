"""Fixtures for the metrics tests."""

from __future__ import annotations

import sys
from pathlib import Path

# The support helpers are imported as ``tests.support.*`` (as the other suites do), which
# needs the repository root on sys.path: `python -m pytest` puts it there, the `pytest`
# script does not. Remove once pytest's `pythonpath` setting includes ".".
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support.prometheus import prometheus  # noqa: E402

__all__ = ["prometheus"]
