"""Fixtures of the reliability tests."""

from support.multinode import multinode

__all__ = ["multinode"]
