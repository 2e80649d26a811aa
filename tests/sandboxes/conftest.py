"""Fixtures of the sandbox tests: the Daytona fixture server (``support.daytona_fixtures``)."""

from support.daytona_fixtures import fresh_server, server

__all__ = ["fresh_server", "server"]
