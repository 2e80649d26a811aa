"""The S3 server the artifact tests share starts on another port when its first is taken (a
second pytest worker can bind the free port found before moto_server does)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support import moto_s3


def test_a_taken_port_is_left_for_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1], moto_s3._free_port()])
    monkeypatch.setattr(moto_s3, "_free_port", lambda: next(ports))
    server = moto_s3.start_moto(tmp_path / "moto.log")
    try:
        assert server.endpoint != f"http://127.0.0.1:{taken.getsockname()[1]}"
        assert server.process.poll() is None
        bucket = server.make_bucket("rb-port-test")
        assert server.keys(bucket) == []
    finally:
        moto_s3.stop_moto(server)
        taken.close()
