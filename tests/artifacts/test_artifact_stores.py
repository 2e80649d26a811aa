"""Artifact bundles and stores: a directory packed and written back whole, bounded, without
following links or leaving its directory; stores on a path and on S3 (moto_server on loopback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.moto_s3 import MotoS3, moto_s3

from ray_bench.artifacts import Bundle, LocalStore, open_store, pack, parse_setting, unpack
from ray_bench.artifacts.store import FsspecStore, checked_store
from ray_bench.errors import ArchiveEscapeError, ArtifactStoreError, UserInputError

__all__ = ["moto_s3"]


def _attempt_dir(root: Path) -> Path:
    (root / "logs" / "verifier").mkdir(parents=True)
    (root / "logs" / "agent").mkdir(parents=True)  # empty: must survive
    (root / "result.json").write_text('{"reward": 1.0}')
    (root / "logs" / "verifier" / "reward.txt").write_text("1\n")
    (root / "logs" / "verifier" / "big.bin").write_bytes(b"x" * 5000)
    tool = root / "logs" / "run.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return root


def test_pack_unpack_round_trip(tmp_path: Path) -> None:
    src = _attempt_dir(tmp_path / "a")
    secret = tmp_path / "node-secret"
    secret.write_text("not yours")
    os.symlink(secret, src / "logs" / "link")
    bundle = pack(src)
    assert bundle.files[0][0] == "result.json"
    assert "logs/link" not in {f for f, _, _ in bundle.files}  # a link is never followed
    out = tmp_path / "b"
    assert unpack(bundle, out) == bundle.size
    assert (out / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
    assert (out / "logs" / "agent").is_dir()
    assert os.access(out / "logs" / "run.sh", os.X_OK)
    assert not (out / "logs" / "link").exists()


def test_pack_bound_keeps_the_summary(tmp_path: Path) -> None:
    bundle = pack(_attempt_dir(tmp_path / "a"), max_bytes=100)
    names = [f for f, _, _ in bundle.files]
    assert names[0] == "result.json" and "logs/verifier/big.bin" not in names
    assert bundle.omitted >= 1 and bundle.size <= 100


@pytest.mark.parametrize("bad", ["../escape", "/etc/passwd", "a/../../b"])
def test_unpack_refuses_escapes(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ArchiveEscapeError):
        unpack(Bundle(files=((bad, b"x", False),)), tmp_path / "d")
    assert not (tmp_path / "escape").exists()


def test_settings() -> None:
    assert parse_setting("auto") is None and parse_setting("ray") is None
    assert parse_setting("/srv/artifacts/") == "/srv/artifacts"
    assert parse_setting("s3://bucket/some/prefix/") == "s3://bucket/some/prefix"
    for bad, words in [("rel/path", "relative"), ("s3://AKIA:secret@bucket/p", "credentials"),
                       ("s3:///p", "no bucket"), ("nosuchfs://b/p", "no filesystem")]:
        with pytest.raises(UserInputError, match=words) as info:
            parse_setting(bad)
        assert "secret" not in info.value.line()


def test_local_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    assert isinstance(store, LocalStore)
    uri = store.put_tree(_attempt_dir(tmp_path / "a"), "run/attempts/x-a1")
    assert uri == str(tmp_path / "store" / "run" / "attempts" / "x-a1")
    got = store.get_tree("run/attempts/x-a1", tmp_path / "back")
    assert (got / "logs" / "verifier" / "reward.txt").read_text() == "1\n"


def test_s3_store_on_moto(tmp_path: Path, moto_s3: MotoS3) -> None:
    bucket = moto_s3.make_bucket("rb-artifacts-unit")
    store = checked_store(f"s3://{bucket}/pre")
    assert isinstance(store, FsspecStore)
    uri = store.put_tree(_attempt_dir(tmp_path / "a"), "run/attempts/x-a1")
    assert uri == f"s3://{bucket}/pre/run/attempts/x-a1"
    assert moto_s3.keys(bucket) == ["pre/run/attempts/x-a1/logs/run.sh",
                                    "pre/run/attempts/x-a1/logs/verifier/big.bin",
                                    "pre/run/attempts/x-a1/logs/verifier/reward.txt",
                                    "pre/run/attempts/x-a1/result.json"]
    got = store.get_tree("run/attempts/x-a1", tmp_path / "back")
    assert (got / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
    with pytest.raises(UserInputError, match="rb-no-such-bucket"):
        checked_store("s3://rb-no-such-bucket/p")
    with pytest.raises(ArtifactStoreError, match="cannot write"):
        FsspecStore(f"s3://{bucket}/pre").put_tree(tmp_path / "missing", "k")


def test_a_store_that_never_answers_is_refused_within_the_probe_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 58: an S3 endpoint that accepts connections and never answers was refused only
    after 84 s (botocore's timeouts and retries)."""
    import socket
    import time

    from support.moto_s3 import S3_ENV

    from ray_bench.artifacts import store as stores

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # connections queue in the backlog; nothing ever reads or answers them
    try:
        for name, value in {**S3_ENV, "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{listener.getsockname()[1]}"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(stores, "PROBE_TIMEOUT_SEC", 2.0)
        monkeypatch.setattr(stores, "_OPEN", {})
        started = time.monotonic()
        with pytest.raises(UserInputError, match="no answer within 2 s"):
            checked_store("s3://rb-hanging-bucket/p")
        assert time.monotonic() - started < 10
    finally:
        listener.close()
