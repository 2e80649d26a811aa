"""A real S3-compatible server on loopback: ``moto_server`` (moto's own HTTP server, the
same one its users run), started on a free port and stopped after. The environment it
gives is what a node of a cluster would have: credentials and the endpoint as botocore reads
them (``AWS_ENDPOINT_URL_S3``); moto accepts any key."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

S3_ENV = {"AWS_ACCESS_KEY_ID": "rb-test-access", "AWS_SECRET_ACCESS_KEY": "rb-test-secret-0123456789",
          "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class MotoS3:
    endpoint: str
    process: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {**S3_ENV, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def make_bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, **_creds()).create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, **_creds())
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _creds() -> dict[str, str]:
    return {"aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: Ports tried: the free port is found before moto_server binds it, so another process (a second
#: pytest worker starting its own server) can take it first; moto_server then exits at once.
START_TRIES = 5


def start_moto(log: Path) -> MotoS3:
    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    for _ in range(START_TRIES - 1):
        server = _start_on(binary, _free_port(), log)
        if server is not None:
            return server
    server = _start_on(binary, _free_port(), log)
    if server is None:
        raise RuntimeError(f"moto_server did not start on {START_TRIES} ports: {log.read_text()[-2000:]}")
    return server


def _start_on(binary: str, port: int, log: Path) -> MotoS3 | None:
    """The server on ``port``, or None when it exited (the port was taken meanwhile). Ready means
    it answers and is still running: an answer from a server that exited came from another's."""
    with log.open("wb") as out:
        process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                   stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=5):
                pass
        except OSError:
            pass
        else:
            if process.poll() is None:
                return MotoS3(endpoint, process)
        if process.poll() is not None:
            return None
        if time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=20)
            raise RuntimeError(f"moto_server did not answer on {endpoint} within 60 s: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def stop_moto(server: MotoS3) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=20)


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """The server, with its environment set in this process for the module's tests."""
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop_moto(server)
