"""Fixtures for the metrics tests."""

from __future__ import annotations

from support.prometheus import prometheus

__all__ = ["prometheus"]
